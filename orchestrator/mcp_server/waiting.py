"""Waiting for a task while telling the MCP client how far it got.

The wait asks for the task's state every POLL_S seconds instead of following its event
stream: over HTTP the tools reach /v1 through `httpx.ASGITransport`, which hands back a
response only once the app has finished it, so an event stream would arrive all at once
when the task ends and no progress could be reported on the way.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from sdk import TaskHandle, TaskState

from .results import WaitOutcome

# Half a second: a step of a real model takes seconds, so no step goes unreported for long,
# and a waiting client costs the API two cheap reads a second.
POLL_S = 0.5

Progress = Callable[[float, float | None, str | None], Awaitable[None]]


def progress_line(state: TaskState) -> str:
    spend = state.spend
    return f"{state.status.value}: step {state.step}/{state.max_steps}, {spend.tokens_used:,}/{spend.token_limit:,} tokens"


async def wait_for(task: TaskHandle, timeout_s: float, progress: Progress) -> WaitOutcome:
    """The task's final state, or its state at `timeout_s` with `timed_out`; each change of step, tokens or
    status is reported as progress (step of max_steps)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    reported: tuple[object, ...] | None = None
    while True:
        state = await task.status()
        seen = (state.status, state.step, state.spend.tokens_used)
        if seen != reported:
            reported = seen
            await progress(state.step, state.max_steps, progress_line(state))
        if state.status.is_final:
            return WaitOutcome(state=state, timed_out=False)
        left = deadline - loop.time()
        if left <= 0:
            return WaitOutcome(state=state, timed_out=True)
        await asyncio.sleep(min(POLL_S, left))
