"""Whether a tool worker serves a queue, judged by evidence (activities/tool_workers.serving): Temporal's poller
list keeps a dead worker for minutes, so a poller counts only if it asked for work after the task's call, still
queued, was scheduled; a call a worker took means the queue is served and the tool is slow."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from activities.tool_workers import TAKEN_WITHIN_S, ToolCallSeen, serving

NOW = datetime(2026, 12, 6, 4, 0, tzinfo=UTC)


def ago(seconds: float) -> datetime:
    return NOW - timedelta(seconds=seconds)


def test_a_worker_that_polled_before_the_call_was_queued_and_never_since_serves_nothing() -> None:
    """SIGKILLed 30 s ago, listed still: had it lived, its waiting poll would have taken the call."""
    assert serving([ago(30)], [ToolCallSeen(started=False, scheduled_at=ago(5))], NOW) == 0


def test_a_worker_that_polled_after_the_call_was_queued_serves_the_queue() -> None:
    """Alive, and busy with calls queued before this one: the call waits its turn."""
    assert serving([ago(30), ago(1)], [ToolCallSeen(started=False, scheduled_at=ago(5))], NOW) == 1


def test_a_taken_call_means_the_queue_is_served_whatever_the_list_says() -> None:
    calls = [ToolCallSeen(started=True, scheduled_at=ago(6)), ToolCallSeen(started=False, scheduled_at=ago(5))]
    assert serving([ago(50)], calls, NOW) == 1
    assert serving([], calls, NOW) == 1  # a worker took it, even if the list no longer names one


def test_without_a_call_queued_long_enough_to_judge_by_the_list_is_taken_as_it_is() -> None:
    just_queued = [ToolCallSeen(started=False, scheduled_at=ago(TAKEN_WITHIN_S / 2))]
    assert serving([ago(40)], just_queued, NOW) == 1
    assert serving([ago(40), ago(10)], [], NOW) == 2
    assert serving([], [], NOW) == 0


def test_the_oldest_queued_call_sets_the_moment_a_live_worker_must_have_polled_after() -> None:
    calls = [ToolCallSeen(started=False, scheduled_at=ago(20)), ToolCallSeen(started=False, scheduled_at=ago(5))]
    assert serving([ago(10)], calls, NOW) == 1
