"""The store's side of the reconciler: a task's `stuck` beside its state, the unfinished tasks in pages, and the
final state of a workflow that ended in Temporal, none of which a writer can undo for another."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from orchestrator.store import Store
from sdk import Spend, Stuck, TaskState, TaskStatus

pytestmark = pytest.mark.postgresql  # the store's SQL must mean the same on SQLite and PostgreSQL

T0 = datetime(2026, 12, 5, 21, 0, tzinfo=UTC)
SPEC = json.dumps({"agent": "writer", "input": "hello", "budget": {"tokens": 1000}})
STUCK = Stuck(failures=7, since=T0, error="[TMPRL1100] Nondeterminism error: ...", cause="non_deterministic_error")


def _state(
    task_id: str, status: TaskStatus = TaskStatus.running, *, tenant: str = "acme", at: datetime = T0, step: int = 1
) -> TaskState:
    return TaskState(
        task_id=task_id,
        agent="writer",
        agent_version="v1",
        model="m",
        tenant=tenant,
        status=status,
        step=step,
        max_steps=10,
        spend=Spend(token_limit=1000),
        updated_at=at,
    )


def test_a_stuck_mark_is_read_back_with_the_state_and_outlives_the_workflows_writes(store: Store) -> None:
    store.tasks.create("t1", SPEC, _state("t1"))
    assert store.tasks.mark_stuck("t1", STUCK) is True

    assert store.tasks.get("t1").state.stuck == STUCK
    assert [t.stuck for t in store.tasks.list()] == [STUCK]
    # The workflow writes its state without knowing it is stuck (a local activity retried, say): the mark stays.
    store.tasks.save_state(_state("t1", step=2))
    assert store.tasks.get("t1").state.stuck == STUCK and store.tasks.get("t1").state.step == 2
    # A state read back (carrying the mark) and saved is the state alone: clearing the mark still clears it.
    store.tasks.save_state(store.tasks.get("t1").state)
    assert store.tasks.mark_stuck("t1", None) is True
    assert store.tasks.get("t1").state.stuck is None
    assert store.tasks.mark_stuck("t1", None) is False  # nothing to clear


def test_a_final_task_is_never_stuck(store: Store) -> None:
    store.tasks.create("t1", SPEC, _state("t1"))
    store.tasks.mark_stuck("t1", STUCK)
    store.tasks.save_state(_state("t1", TaskStatus.completed))  # the workflow ended it after all
    assert store.tasks.get("t1").state.stuck is None
    assert store.tasks.mark_stuck("t1", STUCK) is False
    assert store.tasks.count_stuck() == {}


def test_stuck_tasks_are_counted_by_tenant(store: Store) -> None:
    for task_id, tenant in (("a1", "acme"), ("a2", "acme"), ("g1", "globex"), ("g2", "globex")):
        store.tasks.create(task_id, SPEC, _state(task_id, tenant=tenant))
    for task_id in ("a1", "a2", "g1"):
        store.tasks.mark_stuck(task_id, STUCK)
    assert store.tasks.count_stuck() == {"acme": 2, "globex": 1}


def test_a_final_state_from_temporal_is_written_over_an_unfinished_row_only(store: Store) -> None:
    store.tasks.create("t1", SPEC, _state("t1"))
    store.tasks.mark_stuck("t1", STUCK)
    ended = _state("t1", TaskStatus.failed).model_copy(update={"error": "its workflow was terminated in Temporal"})
    assert store.tasks.end_unsettled(ended) is True
    record = store.tasks.get("t1")
    assert record.state.status == TaskStatus.failed and record.state.stuck is None and record.spec_json == SPEC
    assert store.tasks.count_stuck() == {}

    # A task the workflow ended itself keeps its own ending.
    store.tasks.create("t2", SPEC, _state("t2"))
    store.tasks.save_state(_state("t2", TaskStatus.completed).model_copy(update={"result": "done"}))
    assert store.tasks.end_unsettled(ended.model_copy(update={"task_id": "t2"})) is False
    assert store.tasks.get("t2").state.result == "done"
    with pytest.raises(ValueError, match="final states"):
        store.tasks.end_unsettled(_state("t1", TaskStatus.running))


def test_unfinished_tasks_come_in_pages_least_recently_updated_first(store: Store) -> None:
    for n in range(7):
        store.tasks.create(f"t{n}", SPEC, _state(f"t{n}", at=T0 + timedelta(seconds=10 - n)))
    store.tasks.create("done", SPEC, _state("done", TaskStatus.completed, at=T0 - timedelta(days=1)))
    store.tasks.create("same-time", SPEC, _state("same-time", at=T0 + timedelta(seconds=4)))  # ties t6 on time

    first = store.tasks.unsettled(limit=3)
    assert [t.state.task_id for t in first] == ["same-time", "t6", "t5"]  # a tie goes by id
    after = (first[-1].updated_at, first[-1].state.task_id)
    second = store.tasks.unsettled(after=after, limit=3)
    assert [t.state.task_id for t in second] == ["t4", "t3", "t2"]
    # t6 moves on meanwhile: updated, it comes again later in the round instead of being lost behind the page.
    store.tasks.save_state(_state("t6", at=T0 + timedelta(minutes=1)))
    rest = store.tasks.unsettled(after=(second[-1].updated_at, second[-1].state.task_id), limit=3)
    assert [t.state.task_id for t in rest] == ["t1", "t0", "t6"]
    assert store.tasks.unsettled(after=(rest[-1].updated_at, rest[-1].state.task_id), limit=3) == []
