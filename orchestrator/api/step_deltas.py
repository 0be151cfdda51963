"""A step's text as it is written, for every face of the API: the events stream, `/writing`, the own loop.

`step_text` follows one step from whichever source writes it (writing_sources.py: this process, the node
holding its lease, or its heartbeat), across the attempts that take it over after a cut, and passes what it
reads through a `TextCursor`, so what it yields always adds up to the step's text: deltas, and a `Reset`
where a new attempt departs from what was sent. Once the step is stored, the stored text has the last word.
Deltas are never stored and never enter the workflow's history.

Nothing here checks the caller: every route asks `svc.task_record(task_id, caller)` first, which refuses
anyone who may not see the task.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from sdk.wire.writing import WRITING_KEEPALIVE_S

from ..store import Store
from .services import Services
from .text_cursor import Change, Delta, Reset, TextCursor
from .writing_sources import (
    SourceEnd,
    SourceItem,
    SourcePiece,
    SourceStart,
    board_generation,
    from_board,
    from_heartbeat,
    from_node,
    node_of,
    on_board,
)

__all__ = ["Change", "Delta", "Reset", "step_text", "stored_text", "text_so_far"]

# With no source to read (the step between attempts, its lease being placed, an attempt whose process serves
# no writing route) the step is looked for again this often: half a heartbeat (activities/step/heartbeats.py).
LOOK_AGAIN_S = 0.25


async def step_text(svc: Services, task_id: str, step: int, after: int = 0) -> AsyncIterator[Change]:
    """The text of step `step` of `task_id` as it is written: `Delta(offset, text)`s, each appended at `offset`
    (the length the caller holds), and a `Reset(offset)` when an attempt that took the step over departs from
    what was sent (the caller drops its text from `offset` on). `after`: the caller already holds the step's
    first `after` characters; they are not sent again (a Reset below `after` still is).

    Ends when the step's generation finishes, or the task moves past the step or ends; then, if the step is
    stored, with what makes the caller's text exactly the stored step's text (the tail it missed, or a Reset
    and the text). The caller must have checked that its client may see the task."""
    cursor = TextCursor(skip=after)
    async for item in _items(svc, task_id, step):
        if isinstance(item, SourcePiece):
            changes = cursor.take(item.offset, item.text)
        else:
            changes = cursor.end(item.length) if isinstance(item, SourceEnd) else []
        for change in changes:
            yield change
    stored = await stored_text(svc, task_id, step)
    if stored is not None:
        for change in cursor.settle(stored):
            yield change


async def text_so_far(svc: Services, task_id: str, step: int) -> str:
    """The whole text step `step` has written so far (empty when it writes nothing now), in one read."""
    generation = on_board(task_id, step)
    if generation is not None:
        return generation.after(0).text
    node = await node_of(svc, task_id, step)
    if node is not None:
        cursor = TextCursor()
        async for item in from_node(node, task_id, step, follow=False, wait_s=0):  # a look, not a wait
            if isinstance(item, SourcePiece):
                cursor.take(item.offset, item.text)
        if cursor.held:
            return cursor.held
    piece = await from_heartbeat(svc, task_id)
    return piece.text if piece is not None else ""


async def stored_text(svc: Services, task_id: str, step: int) -> str | None:
    """The text of step `step` as its checkpoint stores it (its assistant message's content); None until the
    step is stored, or for a step that made no model call."""
    return await svc.db(_stored_text, svc.store, task_id, step)


def _stored_text(store: Store, task_id: str, step: int) -> str | None:
    summaries = store.checkpoints.list(task_id)
    for i in range(len(summaries) - 1, 0, -1):
        if summaries[i].step == step:
            messages = store.checkpoints.read(summaries[i].id).messages[summaries[i - 1].message_count :]
            return next((m.content or "" for m in messages if m.role == "assistant"), None)
    return None


async def _items(svc: Services, task_id: str, step: int) -> AsyncIterator[SourceItem]:
    """What the step's sources say, one attempt after another, while the step may still be written."""
    read_to_cut = 0  # the newest attempt read to its cut: only a later one has more to say
    while await _may_write(svc, task_id, step):
        attempt, heard = read_to_cut, False
        async for item in await _source(svc, task_id, step, read_to_cut):
            heard = True
            if isinstance(item, SourceStart):
                attempt = item.attempt
                continue
            yield item
            if isinstance(item, SourceEnd):
                if item.finished:
                    return
                read_to_cut = max(read_to_cut, attempt)
        if not heard:
            if (piece := await from_heartbeat(svc, task_id)) is not None:
                yield piece
            await asyncio.sleep(LOOK_AGAIN_S)


async def _source(svc: Services, task_id: str, step: int, read_to_cut: int) -> AsyncIterator[SourceItem]:
    """The source of the step's attempt after `read_to_cut`: its lease's node, else this process once the attempt
    starts here (no lease: the control worker generates it, here or in a process of its own); else nothing."""
    node = await node_of(svc, task_id, step)
    if node is not None:
        # The first attempt starts on its lease's node: wait there for it. After a cut the step may go on
        # anywhere: look briefly, then ask the lease books again.
        wait_s = LOOK_AGAIN_S if read_to_cut else WRITING_KEEPALIVE_S
        return from_node(node, task_id, step, newer_than=read_to_cut, wait_s=wait_s)
    generation = await board_generation(task_id, step, read_to_cut, LOOK_AGAIN_S)
    return from_board(generation) if generation is not None else _nothing()


async def _nothing() -> AsyncIterator[SourceItem]:
    return
    yield


async def _may_write(svc: Services, task_id: str, step: int) -> bool:
    """Whether the task may still write step `step`: it is not final and has not stored that step yet."""
    record = await svc.db(svc.store.tasks.get, task_id)
    return record is not None and not record.state.status.is_final and record.state.step < step
