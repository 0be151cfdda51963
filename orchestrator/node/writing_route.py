"""The node's writing route: a running step's text, to the control plane, as the engine writes it.

`GET /v1/peer/writing/<task_id>/<step>?after=N&newer_than=A&wait_ms=W&follow=true` on the peer server, with a writing ticket
the control plane minted for this node, task and step (sdk/wire/writing.py). The answer is newline-delimited
JSON: the attempt that writes (the newest, if its number is above A, the reader having read A to its cut; waited for
up to W ms if none runs yet), the text
after offset N as it grows, then how the generation ended. The text comes from this process's `WritingBoard`,
which the generate activity fills delta by delta.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from activities.step.writing_board import Generation, WritingBoard
from sdk.wire.limits import MAX_STORED_INT
from sdk.wire.writing import (
    WRITING_KEEPALIVE_S,
    WRITING_PATH,
    WRITING_TICKET_HEADER,
    WritingLine,
    writing_key,
    writing_ticket_allows,
)

_OFFSET = re.compile(r"^\d{1,15}$")


def writing_route(node_id: str, secret: Callable[[], str | None], board: WritingBoard) -> Route:
    """The route, checking tickets against this node's current secret (read at each call: it may change)."""

    async def serve_writing(request: Request) -> Response:
        task_id = request.path_params["task_id"]
        step = request.path_params["step"]
        after = request.query_params.get("after", "0")
        newer_than = request.query_params.get("newer_than", "0")
        wait_ms = request.query_params.get("wait_ms", str(int(WRITING_KEEPALIVE_S * 1000)))
        if not all(_OFFSET.match(n) for n in (after, newer_than, wait_ms)) or step > MAX_STORED_INT:
            return _refusal(422, "after", "step, after, newer_than and wait_ms must be whole numbers")
        node_secret = secret()
        ticket = request.headers.get(WRITING_TICKET_HEADER, "")
        if not node_secret or not writing_ticket_allows(ticket, writing_key(node_secret), node_id, task_id, step):
            return _refusal(403, "ticket", "no writing ticket from the control plane for this node, task and step")
        # A reader that comes before the generation starts (its lease is granted first) waits for it here, so it
        # gets the first token as the engine writes it; `wait_ms` at most, never past a keep-alive's time, so it
        # looks again for where the step went if it went elsewhere.
        wait_s = min(int(wait_ms) / 1000, WRITING_KEEPALIVE_S)
        generation = await board.wait_for(task_id, step, int(newer_than), wait_s)
        if generation is None:
            return _refusal(404, "step", f"step {step} of {task_id} is not generating on node {node_id}")
        follow = request.query_params.get("follow", "true") != "false"
        return StreamingResponse(_lines(generation, int(after), follow), media_type="application/x-ndjson")

    return Route(WRITING_PATH + "/{task_id:path}/{step:int}", serve_writing, methods=["GET"])


async def _lines(generation: Generation, after: int, follow: bool) -> AsyncIterator[bytes]:
    yield _line(WritingLine(attempt=generation.attempt, base=generation.base))
    if follow:
        async for piece in generation.follow(after, WRITING_KEEPALIVE_S):
            yield _line(WritingLine(offset=piece.offset, text=piece.text) if piece.text else WritingLine())
    else:
        piece = generation.after(after)
        if piece.text:
            yield _line(WritingLine(offset=piece.offset, text=piece.text))
    yield _line(WritingLine(end=generation.ending, length=generation.length))


def _line(line: WritingLine) -> bytes:
    return line.model_dump_json(exclude_none=True).encode() + b"\n"


def _refusal(status: int, field: str, message: str) -> JSONResponse:
    return JSONResponse({"error": {"field": field, "message": message}}, status_code=status)
