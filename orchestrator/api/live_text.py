"""The text deltas of one task events stream (`deltas=true`): followed as written, settled at each step event.

A background task follows each step the task generates (step_deltas.step_text) and queues what it yields; the
stream sends the queue's messages as they come, between its reads of the stored log. When the log's `step`
event of a step arrives, the stream first sends what makes the client's text of that step exactly the stored
text (step_deltas.stored_text: the tail it missed, or a reset and the text), and nothing for that step after.
So the deltas a client gets for a step always add up to the step's text, whatever happened on the way.
"""

from __future__ import annotations

import asyncio
import contextlib
import json

from sse_starlette import ServerSentEvent

from sdk.wire.events import TOKEN_DELTA_EVENT, TOKEN_RESET_EVENT

from .services import Services
from .step_deltas import LOOK_AGAIN_S, step_text, stored_text
from .text_cursor import Change, Delta, TextCursor


class LiveText:
    """Start with `start()`, end with `close()`; `wait`, `ready` and `settle` give the messages to send."""

    def __init__(self, svc: Services, task_id: str) -> None:
        self.svc, self.task_id = svc, task_id
        self._queue: asyncio.Queue[tuple[int, Change]] = asyncio.Queue()
        self._held: dict[int, str] = {}  # the text of each step as sent
        self._settled: set[int] = set()
        self._first: int | None = None  # the first step followed: earlier steps' events were history
        self._follower: asyncio.Task | None = None

    def start(self) -> None:
        self._follower = asyncio.create_task(self._follow())

    async def close(self) -> None:
        if self._follower is not None:
            self._follower.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._follower

    async def wait(self, timeout_s: float) -> list[ServerSentEvent]:
        """The messages queued within `timeout_s` (as soon as there is one), or none."""
        try:
            first = await asyncio.wait_for(self._queue.get(), timeout_s)
        except TimeoutError:
            return []
        return self._send(first) + self.ready()

    async def drained(self, timeout_s: float) -> list[ServerSentEvent]:
        """The task is final: the messages of what its last generation wrote before it ended. The follower ends
        once its sources have said all (a cut generation's node sends its text, then the end), within `timeout_s`."""
        if self._follower is not None:
            await asyncio.wait({self._follower}, timeout=timeout_s)
        return self.ready()

    def ready(self) -> list[ServerSentEvent]:
        """The messages queued now."""
        messages: list[ServerSentEvent] = []
        while not self._queue.empty():
            messages += self._send(self._queue.get_nowait())
        return messages

    async def settle(self, step: int) -> list[ServerSentEvent]:
        """Before the stored `step` event of `step`: what makes the client's text of it the stored one."""
        messages = self.ready()
        if self._first is None or step < self._first or step in self._settled:
            return messages
        self._settled.add(step)
        stored = await stored_text(self.svc, self.task_id, step)
        if stored is None:
            return messages
        cursor = TextCursor(held=self._held.pop(step, ""))
        return messages + [self._message(step, change) for change in cursor.settle(stored)]

    def _send(self, queued: tuple[int, Change]) -> list[ServerSentEvent]:
        step, change = queued
        if step in self._settled:
            return []
        held = self._held.get(step, "")
        self._held[step] = held + change.text if isinstance(change, Delta) else held[: change.offset]
        return [self._message(step, change)]

    def _message(self, step: int, change: Change) -> ServerSentEvent:
        data: dict[str, object] = {"task_id": self.task_id, "step": step, "offset": change.offset}
        if isinstance(change, Delta):
            return ServerSentEvent(data=json.dumps({**data, "text": change.text}), event=TOKEN_DELTA_EVENT)
        return ServerSentEvent(data=json.dumps(data), event=TOKEN_RESET_EVENT)

    async def _follow(self) -> None:
        """Follow each step in turn while the task runs: the one it writes now, then the next."""
        followed = 0
        while True:
            record = await self.svc.db(self.svc.store.tasks.get, self.task_id)
            if record is None or record.state.status.is_final:
                return
            step = max(record.state.step + 1, followed + 1)
            if self._first is None:
                self._first = step
            async for change in step_text(self.svc, self.task_id, step):
                self._queue.put_nowait((step, change))
            followed = step
            await asyncio.sleep(LOOK_AGAIN_S)
