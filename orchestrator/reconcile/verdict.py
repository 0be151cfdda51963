"""What the reconciler makes of a task's row and what Temporal says of its workflow: pure, no I/O.

Temporal's word comes in as one of three findings (`Running`, `Closed`, `Missing`), read by
`temporal_reading`; the verdict is one of four actions (`Leave`, `MarkStuck`, `Unstick`, `End`), carried out by
`reconciler`. Keeping the rule here lets the unit tests state every case without a server.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from sdk import Stuck, TaskState, TaskStatus

# Temporal counts a workflow task's attempts from 1: a pending task on attempt 2 or more has failed (or timed
# out) on the attempts before it, and nothing of the workflow moves until one succeeds.
FIRST_RETRY = 2
# Causes that one routine event explains: a worker restarted mid-task (its task times out and another worker
# runs it), or a signal arrived while the task completed (Temporal refuses the completion and schedules another).
# One of them in a row is not a stuck workflow; two in a row are.
ROUTINE_ONCE = frozenset({"timeout", "unhandled_command", "reset_sticky_task_queue"})
# A failure message can hold a whole stack of a nondeterminism report: the state keeps its opening, which names
# the error; Temporal's UI and `temporal workflow show` have the rest.
MAX_ERROR_CHARS = 2000
ClosedHow = Literal["completed", "failed", "terminated", "timed_out", "cancelled"]


# ----- what Temporal says --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Failing:
    """The workflow's pending workflow task is on a retry: `attempt` of it, after failures Temporal recorded."""

    attempt: int
    since: datetime | None  # when the first failure of this streak was recorded (None: history does not say)
    error: str | None  # its failure message (None: only timeouts, which carry none)
    cause: str  # Temporal's WorkflowTaskFailedCause, short and lower case ("non_deterministic_error"), or "timeout"


@dataclass(frozen=True)
class Running:
    """The workflow (its latest run, after any continue-as-new) is running; `failing` while its task is retried."""

    failing: Failing | None = None


@dataclass(frozen=True)
class Closed:
    """The workflow's latest run has ended (a continue-as-new is not an end: its next run is the latest)."""

    how: ClosedHow
    at: datetime | None
    account: str | None = None  # Temporal's word: the failure's message, the termination's reason
    by: str | None = None  # who terminated it (the caller's identity)
    result: TaskState | None = None  # a completed run's answer, when it could be read


@dataclass(frozen=True)
class Missing:
    """Temporal knows no workflow of the task's id: not started yet (a submit in progress), or its history is gone
    after the namespace's retention. Neither is the reconciler's to settle: it leaves the row as it is."""


Finding = Running | Closed | Missing


# ----- what to do ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Leave:
    """The row already says what Temporal says."""


@dataclass(frozen=True)
class MarkStuck:
    """Record `stuck` on the row. `began`: a new streak (an event for the task's log); `failures_seen`: failed
    attempts not counted before (the metric's increment)."""

    stuck: Stuck
    began: bool
    failures_seen: int


@dataclass(frozen=True)
class Unstick:
    """The workflow task succeeded again: clear the row's `stuck` (`was`, for the task's log)."""

    was: Stuck


@dataclass(frozen=True)
class End:
    """The workflow ended without the row saying so: write `state` (final) over it."""

    state: TaskState
    how: ClosedHow


Action = Leave | MarkStuck | Unstick | End


def verdict(state: TaskState, finding: Finding, now: datetime) -> Action:
    """What to do about a task that is not final (`state`, as its row has it), given what Temporal says."""
    if isinstance(finding, Missing):
        return Leave()
    if isinstance(finding, Closed):
        return End(final_state(state, finding, now), finding.how)
    failing = finding.failing
    if failing is None or not _is_stuck(failing):
        return Unstick(state.stuck) if state.stuck is not None else Leave()
    before = state.stuck
    stuck = Stuck(
        failures=failing.attempt - 1,
        since=failing.since or (before.since if before is not None else now),
        error=_bounded(failing.error or _no_message(failing.cause)),
        cause=failing.cause,
    )
    if stuck == before:
        return Leave()
    began = before is None or before.since != stuck.since
    seen = stuck.failures if began or before is None else max(0, stuck.failures - before.failures)
    return MarkStuck(stuck, began=began, failures_seen=seen)


def _is_stuck(failing: Failing) -> bool:
    if failing.attempt < FIRST_RETRY:
        return False
    return failing.cause not in ROUTINE_ONCE or failing.attempt > FIRST_RETRY


def _no_message(cause: str) -> str:
    if cause == "timeout":
        return "its workflow task timed out: no worker finished it in time (one that crashes or hangs on it)"
    return f"Temporal recorded no message ({cause})"


def _bounded(text: str) -> str:
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 1] + "…"


def final_state(state: TaskState, closed: Closed, now: datetime) -> TaskState:
    """The final state of a task whose workflow ended in Temporal without writing one: a completed run's own
    answer when it has one, else `failed` (or `cancelled`) with Temporal's account of the end."""
    at = closed.at or now
    if closed.how == "completed" and closed.result is not None and closed.result.status.is_final:
        return closed.result.model_copy(update={"stuck": None, "updated_at": closed.result.updated_at or at})
    status = TaskStatus.cancelled if closed.how == "cancelled" else TaskStatus.failed
    return state.model_copy(
        update={
            "status": status,
            "error": _bounded(ending_error(closed, state.stuck)),
            "waiting_for": None,
            "gpu_trouble": None,
            "question": None,
            "stuck": None,
            "updated_at": at,
        }
    )


def ending_error(closed: Closed, stuck: Stuck | None) -> str:
    """Why the task ended, in Temporal's words, and what kept it stuck before, if it was."""
    account = f": {closed.account}" if closed.account else ""
    match closed.how:
        case "terminated":
            by = f" by {closed.by}" if closed.by else ""
            text = f"its workflow was terminated in Temporal{by}{account or ' (no reason given)'}"
        case "failed":
            text = f"its workflow failed in Temporal{account}"
        case "timed_out":
            text = "its workflow timed out in Temporal (its run or execution timeout passed)"
        case "cancelled":
            text = f"its workflow was cancelled in Temporal{account}"
        case "completed":
            text = f"its workflow completed in Temporal without a final state Berth could read{account}"
    if stuck is not None:
        text += f"; it was stuck before: {stuck.describe()}"
    return text
