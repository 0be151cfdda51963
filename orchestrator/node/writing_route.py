"""The node's writing route: a running step's text, to the control plane, as the engine writes it.

`GET /v1/peer/writing/<task_id>/<step>?after=N&follow=true` on the peer server, with a writing ticket the
control plane minted for this node, task and step (sdk/wire/writing.py). The answer is newline-delimited
JSON: the attempt that writes, the text after offset N as it grows, then how the generation ended. The
text comes from this process's `WritingBoard`, which the generate activity fills delta by delta.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from activities.writing_board import Generation, WritingBoard
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
        if not _OFFSET.match(after) or step > MAX_STORED_INT:
            return _refusal(422, "after", "step and after must be whole numbers")
        node_secret = secret()
        ticket = request.headers.get(WRITING_TICKET_HEADER, "")
        if not node_secret or not writing_ticket_allows(ticket, writing_key(node_secret), node_id, task_id, step):
            return _refusal(403, "ticket", "no writing ticket from the control plane for this node, task and step")
        generation = board.get(task_id, step)
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
