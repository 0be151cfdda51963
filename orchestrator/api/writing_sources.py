"""Where the API reads a running step's text from, best first, each read as the same `SourcePiece`s.

    board      this process's own WritingBoard: the control worker runs in the API's process (tests, small stacks)
    node       the node that holds the step's lease (the lease books say which), over its peer server's writing
               route, on a ticket the API mints with the node's key (sdk/wire/writing.py): each delta as the
               engine writes it
    heartbeat  the generation's last heartbeat, through Temporal (about twice a second): for a generation whose
               process serves no writing route (a control worker of its own, a node without a peer server)

A source's pieces end with a `SourceEnd`: how its generation ended (finished, cut) and its text's length then.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import AsyncIterator
from dataclasses import dataclass
from urllib.parse import quote

import httpx
from pydantic import ValidationError

from activities.step.writing_board import BOARD, Generation
from sdk.wire.writing import WRITING_KEEPALIVE_S, WRITING_PATH, WRITING_TICKET_HEADER, WritingLine, mint_writing_ticket

from ..store.peers import WritingSource
from .services import Services

log = logging.getLogger("berth.api.writing")

# Three keep-alives missed (sdk/wire/writing.py): the node or the path to it is gone; the step is looked for again.
READ_TIMEOUT_S = 3 * WRITING_KEEPALIVE_S
CONNECT_TIMEOUT_S = 2.0


@dataclass(frozen=True)
class SourceStart:
    """The source is attempt `attempt` of the step (numbered across its placements)."""

    attempt: int


@dataclass(frozen=True)
class SourcePiece:
    """The source's text at `offset` is `text`."""

    offset: int
    text: str


@dataclass(frozen=True)
class SourceEnd:
    """The source's generation ended (`finished`: its reply is whole; else cut) with `length` characters."""

    finished: bool
    length: int


SourceItem = SourceStart | SourcePiece | SourceEnd


def on_board(task_id: str, step: int) -> Generation | None:
    """The step's generation when it runs in this process."""
    return BOARD.get(task_id, step)


async def board_generation(task_id: str, step: int, newer_than: int, timeout_s: float) -> Generation | None:
    """The step's generation in this process, of an attempt after `newer_than`, once it starts (within timeout_s)."""
    return await BOARD.wait_for(task_id, step, newer_than, timeout_s)


async def from_board(generation: Generation) -> AsyncIterator[SourceItem]:
    yield SourceStart(generation.attempt)
    async for piece in generation.follow(0):
        if piece.text:
            yield SourcePiece(piece.offset, piece.text)
    yield SourceEnd(generation.ending == "finished", generation.length)


async def node_of(svc: Services, task_id: str, step: int) -> WritingSource | None:
    """The node generating the step (the one its lease is on) and how to reach it; None without a lease."""
    lease = await svc.db(svc.store.leases.for_step, task_id, step)
    if lease is None:
        return None
    return await svc.db(svc.store.peers.writing_source, lease.node_id)


async def from_node(
    source: WritingSource,
    task_id: str,
    step: int,
    follow: bool = True,
    newer_than: int = 0,
    wait_s: float = WRITING_KEEPALIVE_S,
) -> AsyncIterator[SourceItem]:
    """The step's text from its node, from the start, by an attempt after `newer_than` (the node waits up to
    `wait_s` for one to start); nothing at all when the node will not or cannot say."""
    url = f"{source.url}{WRITING_PATH}/{quote(task_id, safe='')}/{step}"
    headers = {WRITING_TICKET_HEADER: mint_writing_ticket(source.key, source.node_id, task_id, step)}
    params = {
        "after": "0",
        "newer_than": str(newer_than),
        "wait_ms": str(int(wait_s * 1000)),
        "follow": "true" if follow else "false",
    }
    try:
        async with _client().stream("GET", url, params=params, headers=headers) as response:
            if response.status_code != 200:
                log.debug("node %s would not serve %s step %d: %d", source.node_id, task_id, step, response.status_code)
                return
            async for raw in response.aiter_lines():
                line = _parse(raw)
                if line is None:
                    continue
                if line.attempt is not None:
                    yield SourceStart(line.attempt)
                elif line.offset is not None and line.text:
                    yield SourcePiece(line.offset, line.text)
                elif line.end is not None and line.end != "writing":
                    yield SourceEnd(line.end == "finished", line.length or 0)
    except httpx.HTTPError as exc:  # the node went away mid-stream: the caller looks for the step again
        log.debug("following %s step %d on %s broke off: %s", task_id, step, source.node_id, exc)


async def from_heartbeat(svc: Services, task_id: str) -> SourcePiece | None:
    """The text the running generation's last heartbeat carried (None: no generation, or Temporal cannot say)."""
    progress = await svc.temporal.writing(task_id)
    return SourcePiece(0, progress.prefix) if progress is not None and progress.prefix else None


def _parse(raw: str) -> WritingLine | None:
    if not raw.strip():
        return None
    try:
        return WritingLine.model_validate_json(raw)
    except ValidationError:
        return None


_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = weakref.WeakKeyDictionary()


def _client() -> httpx.AsyncClient:
    """One connection pool per event loop (an httpx client is bound to the loop it first ran on)."""
    loop = asyncio.get_running_loop()
    client = _clients.get(loop)
    if client is None:
        timeout = httpx.Timeout(CONNECT_TIMEOUT_S, read=READ_TIMEOUT_S)
        client = _clients[loop] = httpx.AsyncClient(timeout=timeout, limits=httpx.Limits(max_connections=None))
    return client
