"""A task's event log as Server-Sent Events.

The workflow's activities append events to the store; this route tails that log. Polling the
store (in the thread pool) every 0.3 s keeps the server stateless: any replica can serve any
stream, a reconnect resumes from `Last-Event-ID`, and nothing has to fan events out between
processes. The stream ends once the task is final and its log is drained, with an `end`
message so that clients (and browsers' EventSource) know not to reconnect; it also ends, with
a `revoked` message, within KEY_RECHECK_S of its key being revoked.

With `deltas=true` the stream also carries `token_delta` messages while a step generates: the text the
generation wrote since the last one, read from its heartbeat through Temporal (the store never holds
them). They have no id, so a reconnect resumes from the last stored event; a delta can be missed then,
never repeated.
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
from sdk.wire.events import END_EVENT, REVOKED_EVENT, TOKEN_DELTA_EVENT
from sdk.wire.limits import MAX_STORED_INT

from .auth import Caller
from .errors import ERROR_RESPONSES
from .services import Services, Svc

POLL_INTERVAL_S = 0.3
READ_BATCH = 500
# The workflow may write its last event just after its final state; after seeing the task
# final with nothing left to read, look this many more times before ending the stream.
FINAL_QUIET_POLLS = 2
PING_INTERVAL_S = 15
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
    return EventSourceResponse(
        tail(svc, task_id, start, caller.key_id, DeltaReader(svc, task_id) if deltas else None), ping=PING_INTERVAL_S
    )


@router.get("/v1/tasks/{task_id}/writing", response_model=Writing)
async def writing(task_id: str, svc: Svc, caller: Caller) -> Writing:
    """What the task's running step has written so far (empty when none generates): for a client that polls
    instead of following the event stream (the MCP server's progress). Read from the generation's heartbeat."""
    record = await svc.task_record(task_id, caller)
    step = record.state.step + 1
    if record.state.status != TaskStatus.running:
        return Writing(task_id=task_id, step=step, text="")
    progress = await svc.temporal.writing(task_id)
    return Writing(task_id=task_id, step=step, text=progress.prefix if progress is not None else "")


class DeltaReader:
    """The text a running step has added since the last look, from its generation's heartbeat."""

    def __init__(self, svc: Services, task_id: str) -> None:
        self.svc, self.task_id = svc, task_id
        self.step, self.text = 0, ""

    async def delta(self, step: int) -> ServerSentEvent | None:
        if step != self.step:  # a new step writes a new answer
            self.step, self.text = step, ""
        progress = await self.svc.temporal.writing(self.task_id)
        written = progress.prefix if progress is not None else ""
        if not written.startswith(self.text):  # a retry that did not continue the cut text starts over
            self.text = ""
        new = written[len(self.text) :]
        if not new:
            return None
        self.text = written
        return ServerSentEvent(
            data=json.dumps({"task_id": self.task_id, "step": step, "text": new}), event=TOKEN_DELTA_EVENT
        )


async def tail(
    svc: Services, task_id: str, after: int, key_id: str, deltas: DeltaReader | None = None
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
            yield ServerSentEvent(data=event.model_dump_json(), event=event.kind, id=str(event.seq))
        if len(events) == READ_BATCH:
            continue
        if deltas is not None and record is not None and record.state.status == TaskStatus.running:
            if (message := await deltas.delta(record.state.step + 1)) is not None:
                yield message
        if final and not events:
            quiet_polls += 1
            if quiet_polls > FINAL_QUIET_POLLS:
                status = record.state.status.value if record else "deleted"
                yield ServerSentEvent(data=json.dumps({"task_id": task_id, "status": status}), event=END_EVENT)
                return
        else:
            quiet_polls = 0
        await asyncio.sleep(POLL_INTERVAL_S)


def _seq(value: str | None) -> int:
    """The seq a reconnecting client last saw; junk (as any the store could not hold) replays from the start."""
    try:
        seq = int(value) if value else 0
    except ValueError:
        return 0
    return seq if 0 <= seq <= MAX_STORED_INT else 0
