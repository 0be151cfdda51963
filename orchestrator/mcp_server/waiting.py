"""Waiting for a task while telling the MCP client how far it got.

The wait asks for the task's state every POLL_S seconds instead of following its event
stream: over HTTP the tools reach /v1 through `httpx.ASGITransport`, which hands back a
response only once the app has finished it, so an event stream would arrive all at once
when the task ends and no progress could be reported on the way.

While a step generates, each report also carries the text it wrote since the last one (read through
`/writing` from the node that generates it, as the engine wrote it: so never more than POLL_S late, one
heartbeat's interval), so an MCP client can show the answer as it is written.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from sdk import TaskHandle, TaskState, TaskStatus, Writing

from .results import WaitOutcome

# A progress message is a status line: a long stretch of new text is cut to its end, which is what a reader
# of a status sees last anyway.
MAX_WRITTEN_CHARS = 500

# What a report's text starts with when the step's text started over (an attempt that did not continue a cut one).
RESTARTED = "[the answer started over] "

# Half a second: a step of a real model takes seconds, so no step goes unreported for long,
# and a waiting client costs the API two cheap reads a second.
POLL_S = 0.5

Progress = Callable[[float, float | None, str | None], Awaitable[None]]


def progress_line(state: TaskState) -> str:
    spend = state.spend
    line = (
        f"{state.status.value}: step {state.step}/{state.max_steps}, {spend.tokens_used:,}/{spend.token_limit:,} tokens"
    )
    return f"{line}; stuck: {state.stuck.describe()}" if state.stuck is not None else line


async def wait_for(task: TaskHandle, timeout_s: float, progress: Progress) -> WaitOutcome:
    """The task's final state, or its state at `timeout_s` with `timed_out`; each change of step, tokens or
    status is reported as progress (step of max_steps), and so is each stretch of text a step writes."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    reported: tuple[object, ...] | None = None
    written = WrittenSoFar()
    while True:
        state = await task.status()
        seen = (state.status, state.step, state.spend.tokens_used, state.stuck)
        new_text = written.since_last(await task.writing()) if state.status == TaskStatus.running else ""
        if seen != reported or new_text:
            reported = seen
            line = progress_line(state)
            await progress(state.step, state.max_steps, f"{line}; writing: {new_text}" if new_text else line)
        if state.status.is_final:
            return WaitOutcome(state=state, timed_out=False)
        left = deadline - loop.time()
        if left <= 0:
            return WaitOutcome(state=state, timed_out=True)
        await asyncio.sleep(min(POLL_S, left))


class WrittenSoFar:
    """What the steps have written, to report only what is new (a retry that does not continue starts over)."""

    def __init__(self) -> None:
        self.step, self.text = 0, ""

    def since_last(self, now: Writing) -> str:
        """The text written since the last report; after a retry that did not continue the step's text, what it
        wrote marked as a restart (the text reported before is not the step's any more)."""
        restarted = now.step == self.step and bool(self.text) and not now.text.startswith(self.text)
        if now.step != self.step or restarted:
            self.step, self.text = now.step, ""
        new, self.text = now.text[len(self.text) :], now.text
        new = new if len(new) <= MAX_WRITTEN_CHARS else "…" + new[-MAX_WRITTEN_CHARS:]
        return f"{RESTARTED}{new}" if restarted else new
