"""A task's event log as Server-Sent Events.

The workflow's activities append events to the store; this route tails that log. Polling the
store (in the thread pool) every 0.3 s keeps the server stateless: any replica can serve any
stream, a reconnect resumes from `Last-Event-ID`, and nothing has to fan events out between
processes. The stream ends once the task is final and its log is drained, with an `end`
message so that clients (and browsers' EventSource) know not to reconnect; it also ends, with
a `revoked` message, within KEY_RECHECK_S of its key being revoked.

With `deltas=true` the stream also carries `token_delta` messages while a step generates: each piece of text
as the engine writes it, followed from the node that generates it (live_text.py, step_deltas.py; the store
never holds them, nor does the workflow's history), and a `token_reset` where an attempt that took a cut step
over wrote otherwise than what was sent. Before a step's stored `step` event comes what makes the step's deltas
add up to its stored text exactly. Deltas have no id, so a reconnect resumes from the last stored event and
gets the running step's text again from its start.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Header, Query
from sse_starlette import EventSourceResponse, ServerSentEvent

from sdk import TaskStatus, Writing
from sdk.wire.events import END_EVENT, REVOKED_EVENT
from sdk.wire.limits import MAX_STORED_INT
from sdk.wire.task_events import StepRecordedEvent, parse_event

from .auth import Caller
from .errors import ERROR_RESPONSES
from .live_text import LiveText
from .services import Services, Svc
from .step_deltas import text_so_far

POLL_INTERVAL_S = 0.3
READ_BATCH = 500
# The workflow may write its last event just after its final state; after seeing the task
# final with nothing left to read, look this many more times before ending the stream.
FINAL_QUIET_POLLS = 2
PING_INTERVAL_S = 15
# A final task's stream waits this long at most for its deltas' sources to say all they had (a node's connection
# already open sends a cut generation's last pieces within milliseconds).
FINAL_DRAIN_S = 2.0
KEY_RECHECK_S = 5.0

router = APIRouter(tags=["tasks"], responses=ERROR_RESPONSES)


@router.get(
    "/v1/tasks/{task_id}/events",
    response_class=EventSourceResponse,
    responses={200: {"content": {"text/event-stream": {}}, "description": "event: <kind>, id: <seq>, data: TaskEvent"}},
)
async def stream_events(
    task_id: str,
    svc: Svc,
    caller: Caller,
    after: Annotated[int, Query(ge=0, le=MAX_STORED_INT, description="only events with a larger seq")] = 0,
    last_event_id: Annotated[str | None, Header(description="set by reconnecting SSE clients")] = None,
    deltas: Annotated[bool, Query(description="also `token_delta` messages: the answer as it is written")] = False,
) -> EventSourceResponse:
    await svc.task_record(task_id, caller)
    start = max(after, _seq(last_event_id))
    return EventSourceResponse(tail(svc, task_id, start, caller.key_id, deltas), ping=PING_INTERVAL_S)


@router.get("/v1/tasks/{task_id}/writing", response_model=Writing)
async def writing(task_id: str, svc: Svc, caller: Caller) -> Writing:
    """What the task's running step has written so far (empty when none generates): for a client that polls
    instead of following the event stream. Read from the node that generates it, as the engine writes it."""
    record = await svc.task_record(task_id, caller)
    step = record.state.step + 1
    if record.state.status != TaskStatus.running:
        return Writing(task_id=task_id, step=step, text="")
    return Writing(task_id=task_id, step=step, text=await text_so_far(svc, task_id, step))


async def tail(
    svc: Services, task_id: str, after: int, key_id: str, deltas: bool = False
) -> AsyncIterator[ServerSentEvent]:
    live = LiveText(svc, task_id) if deltas else None
    if live is not None:
        live.start()
    try:
        async for message in _tail(svc, task_id, after, key_id, live):
            yield message
    finally:
        if live is not None:
            await live.close()


async def _tail(
    svc: Services, task_id: str, after: int, key_id: str, live: LiveText | None
) -> AsyncIterator[ServerSentEvent]:
    quiet_polls = 0
    key_checked = time.monotonic()
    while True:
        if time.monotonic() - key_checked >= KEY_RECHECK_S:
            if not await svc.db(svc.store.keys.is_live, key_id):
                yield ServerSentEvent(
                    data=json.dumps({"task_id": task_id, "error": "the API key was revoked"}), event=REVOKED_EVENT
                )
                return
            key_checked = time.monotonic()
        # Read the status before the events: a final status seen here means every event
        # written before it is in the read below.
        record = await svc.db(svc.store.tasks.get, task_id)
        final = record is None or record.state.status.is_final
        events = await svc.db(svc.store.events.read, task_id, after, READ_BATCH)
        for event in events:
            after = event.seq
            if live is not None:
                typed = parse_event(event)
                settled = await live.settle(typed.data.step) if isinstance(typed, StepRecordedEvent) else live.ready()
                for message in settled:
                    yield message
            # The row as stored, not the typed event (which would add its defaults): the stream's JSON is the log's.
            yield ServerSentEvent(data=event.model_dump_json(), event=event.kind, id=str(event.seq))
        if len(events) == READ_BATCH:
            continue
        if final and not events:
            quiet_polls += 1
            if quiet_polls > FINAL_QUIET_POLLS:
                for message in await live.drained(FINAL_DRAIN_S) if live is not None else []:
                    yield message
                status = record.state.status.value if record else "deleted"
                yield ServerSentEvent(data=json.dumps({"task_id": task_id, "status": status}), event=END_EVENT)
                return
        else:
            quiet_polls = 0
        # Between reads of the log, the deltas go out as they come.
        deadline = time.monotonic() + POLL_INTERVAL_S
        while live is not None and (left := deadline - time.monotonic()) > 0:
            for message in await live.wait(left):
                yield message
        await asyncio.sleep(max(0.0, deadline - time.monotonic()))


def _seq(value: str | None) -> int:
    """The seq a reconnecting client last saw; junk (as any the store could not hold) replays from the start."""
    try:
        seq = int(value) if value else 0
    except ValueError:
        return 0
    return seq if 0 <= seq <= MAX_STORED_INT else 0
