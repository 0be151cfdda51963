"""The workflow's clock and Temporal's continue-as-new hint, as of a moment that history fixes.

`workflow.now()` and `workflow.info().is_continue_as_new_suggested()` answer for the workflow task the code runs
in, and the code after a local activity does not always run in the same workflow task live and on replay (see
code_versions.py, rule 2). A decision that reads them there can go one way live and the other on replay. The
EventClock keeps the answers of the last moment a history event fixes: the run's start, a model call's or tool
call's result, a timer's firing, an update's arrival. Code that chooses commands reads the clock; `mark()` is
called only right after awaiting such an event, never after a local activity.

Runs of version 0 read the live values, as the code that wrote their histories did.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from temporalio import workflow


class EventClock:
    def __init__(self, event_fixed: bool) -> None:
        self.event_fixed = event_fixed
        self._now = workflow.now()
        self._suggested = workflow.info().is_continue_as_new_suggested()

    def mark(self) -> None:
        """Take the time and the hint now: call it only right after awaiting a history event."""
        self._now = workflow.now()
        self._suggested = workflow.info().is_continue_as_new_suggested()

    async def wait(self, done: Callable[[], bool], timeout: timedelta | None = None) -> bool:
        """`workflow.wait_condition(done, timeout)`, False when it timed out; the clock moves when a timer fired or
        the wait was woken, never when `done()` held from the start (the wait returned where it began, maybe right
        after a local activity). A wakeup is a history event only when `done()` reads what handlers and results
        set: a predicate that reads state code sets after a local activity does not belong here."""
        suspended = not done()
        try:
            await workflow.wait_condition(done, timeout=timeout)
        except TimeoutError:
            self.mark()
            return False
        if suspended:
            self.mark()
        return True

    def now(self) -> datetime:
        return self._now if self.event_fixed else workflow.now()

    def time(self) -> float:
        return self.now().timestamp()

    def continue_as_new_suggested(self) -> bool:
        return self._suggested if self.event_fixed else workflow.info().is_continue_as_new_suggested()
