"""What the reconciler makes of a task's row and Temporal's word on its workflow (orchestrator/reconcile/verdict.py):
stuck when its workflow task is on a retry, no longer stuck once it is not, and the row ended when the workflow
ended without ending it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from orchestrator.reconcile.verdict import (
    MAX_ERROR_CHARS,
    Closed,
    End,
    Failing,
    Leave,
    MarkStuck,
    Missing,
    Running,
    Unstick,
    verdict,
)
from sdk import Spend, Stuck, TaskState, TaskStatus

NOW = datetime(2026, 12, 5, 21, 10, tzinfo=UTC)
SINCE = datetime(2026, 12, 5, 21, 1, 32, tzinfo=UTC)
NONDETERMINISM = "[TMPRL1100] Nondeterminism error: Activity type of scheduled event 'a' does not match 'b'"


def _state(status: TaskStatus = TaskStatus.running, stuck: Stuck | None = None) -> TaskState:
    return TaskState(
        task_id="t1",
        agent="writer",
        agent_version="v1",
        model="m",
        tenant="acme",
        status=status,
        step=3,
        max_steps=10,
        spend=Spend(token_limit=1000, tokens_used=400),
        waiting_for="a GPU",
        stuck=stuck,
        updated_at=NOW - timedelta(minutes=20),
    )


def _failing(attempt: int, cause: str = "non_deterministic_error", error: str | None = NONDETERMINISM) -> Running:
    return Running(Failing(attempt=attempt, since=SINCE, error=error, cause=cause))


def test_a_workflow_task_on_a_retry_marks_the_task_stuck_and_counts_each_failure_once() -> None:
    first = verdict(_state(), _failing(2), NOW)
    assert first == MarkStuck(Stuck(failures=1, since=SINCE, error=NONDETERMINISM, cause="non_deterministic_error"),
                              began=True, failures_seen=1)  # fmt: skip
    assert (
        first.stuck.describe() == f"its workflow task has failed 1 time since 2026-12-05 21:01:32 UTC: {NONDETERMINISM}"
    )

    later = verdict(_state(stuck=first.stuck), _failing(8), NOW)
    assert isinstance(later, MarkStuck) and not later.began and later.failures_seen == 6
    assert later.stuck.describe().startswith("its workflow task has failed 7 times since 2026-12-05 21:01:32 UTC: ")
    assert verdict(_state(stuck=later.stuck), _failing(8), NOW) == Leave()  # nothing new: no write


def test_a_new_streak_after_a_recovery_is_counted_whole() -> None:
    before = Stuck(failures=5, since=SINCE - timedelta(hours=1), error="old", cause="workflow_worker_unhandled_failure")
    again = verdict(_state(stuck=before), _failing(3), NOW)
    assert isinstance(again, MarkStuck) and again.began and again.failures_seen == 2


def test_one_routine_timeout_is_not_stuck_but_two_in_a_row_are() -> None:
    """A worker restarted mid-task: its workflow task times out once and another worker runs it."""
    assert verdict(_state(), _failing(2, cause="timeout", error=None), NOW) == Leave()
    twice = verdict(_state(), _failing(3, cause="timeout", error=None), NOW)
    assert isinstance(twice, MarkStuck) and twice.stuck.failures == 2
    assert "no worker finished it in time" in twice.stuck.error


def test_the_mark_is_cleared_once_the_workflow_task_succeeds_again() -> None:
    stuck = Stuck(failures=7, since=SINCE, error=NONDETERMINISM)
    assert verdict(_state(stuck=stuck), Running(), NOW) == Unstick(stuck)
    assert verdict(_state(), Running(), NOW) == Leave()
    assert verdict(_state(), _failing(1), NOW) == Leave()  # the first attempt: not a retry yet


def test_a_long_error_is_kept_to_its_opening() -> None:
    found = verdict(_state(), _failing(2, error="x" * 10_000), NOW)
    assert isinstance(found, MarkStuck) and len(found.stuck.error) == MAX_ERROR_CHARS


def test_a_workflow_terminated_in_temporal_ends_the_row_failed_with_who_and_why() -> None:
    stuck = Stuck(failures=7, since=SINCE, error=NONDETERMINISM)
    closed = Closed("terminated", NOW - timedelta(seconds=30), account="rolled back by ops", by="alice@ops")
    ended = verdict(_state(stuck=stuck), closed, NOW)
    assert isinstance(ended, End) and ended.how == "terminated"
    state = ended.state
    assert state.status == TaskStatus.failed and state.stuck is None and state.waiting_for is None
    assert state.error == (
        "its workflow was terminated in Temporal by alice@ops: rolled back by ops; it was stuck before:"
        f" its workflow task has failed 7 times since 2026-12-05 21:01:32 UTC: {NONDETERMINISM}"
    )
    assert state.updated_at == NOW - timedelta(seconds=30) and state.spend.tokens_used == 400 and state.step == 3


def test_each_way_a_workflow_ends_in_temporal_has_its_words() -> None:
    def error(closed: Closed) -> tuple[TaskStatus, str | None]:
        found = verdict(_state(), closed, NOW)
        assert isinstance(found, End)
        return found.state.status, found.state.error

    assert error(Closed("terminated", None)) == (
        TaskStatus.failed,
        "its workflow was terminated in Temporal (no reason given)",
    )
    assert error(Closed("failed", None, account="activity failed: boom")) == (
        TaskStatus.failed,
        "its workflow failed in Temporal: activity failed: boom",
    )
    assert error(Closed("timed_out", None)) == (
        TaskStatus.failed,
        "its workflow timed out in Temporal (its run or execution timeout passed)",
    )
    assert error(Closed("cancelled", None)) == (TaskStatus.cancelled, "its workflow was cancelled in Temporal")
    assert error(Closed("completed", None)) == (
        TaskStatus.failed,
        "its workflow completed in Temporal without a final state Berth could read",
    )


def test_a_run_that_completed_with_its_final_state_ends_the_row_with_that_state() -> None:
    answer = _state(TaskStatus.completed).model_copy(update={"result": "42", "waiting_for": None, "updated_at": NOW})
    ended = verdict(_state(), Closed("completed", NOW, result=answer), NOW)
    assert ended == End(answer, "completed")


def test_a_workflow_temporal_does_not_know_is_left_alone() -> None:
    """Not started yet (a submit on its way), or purged after retention: neither is the reconciler's to end."""
    assert verdict(_state(TaskStatus.queued), Missing(), NOW) == Leave()
    assert verdict(_state(stuck=Stuck(failures=1, since=SINCE, error="e")), Missing(), NOW) == Leave()
