"""The task registry: idempotent creation, filtered listing, and final states that stale writes cannot undo."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from orchestrator.store import Store, TaskConflict
from sdk import Conflict, Spend, TaskState, TaskStatus

pytestmark = pytest.mark.postgresql  # the store's SQL must mean the same on SQLite and PostgreSQL


def _state(task_id: str, status: TaskStatus = TaskStatus.queued, *, tenant: str = "acme", agent: str = "writer",
           parent: str | None = None, step: int = 0) -> TaskState:  # fmt: skip
    return TaskState(
        task_id=task_id, agent=agent, agent_version="v1", model="m", tenant=tenant, status=status, step=step,
        max_steps=10, spend=Spend(token_limit=1000), parent_task_id=parent,
        updated_at=datetime.now(UTC),
    )  # fmt: skip


SPEC = json.dumps({"agent": "writer", "input": "hello", "budget": {"tokens": 1000}})


def test_create_is_idempotent_for_the_same_spec_and_refuses_another(store: Store) -> None:
    assert store.tasks.create("t1", SPEC, _state("t1")) is True
    assert store.tasks.create("t1", SPEC, _state("t1")) is False
    reordered = json.dumps(dict(reversed(list(json.loads(SPEC).items()))))
    assert store.tasks.create("t1", reordered, _state("t1")) is False
    with pytest.raises(TaskConflict, match="'t1'") as refused:
        store.tasks.create("t1", json.dumps({"agent": "writer", "input": "other"}), _state("t1"))
    assert isinstance(refused.value, Conflict) and refused.value.field == "task_id"

    record = store.tasks.get("t1")
    assert record is not None
    assert record.spec_json == SPEC
    assert record.state == _state("t1").model_copy(update={"updated_at": record.state.updated_at})
    assert record.created_at.tzinfo is not None


def test_delete_undoes_a_create(store: Store) -> None:
    store.tasks.create("t1", SPEC, _state("t1"))
    assert store.tasks.delete("t1") is True
    assert store.tasks.get("t1") is None
    assert store.tasks.delete("t1") is False
    assert store.tasks.create("t1", json.dumps({"another": "spec"}), _state("t1")) is True


def test_save_state_upserts_and_keeps_the_spec(store: Store) -> None:
    store.tasks.save_state(_state("child", TaskStatus.running, step=1))  # never created: written from its state
    record = store.tasks.get("child")
    assert record is not None and record.spec_json is None and record.state.step == 1

    store.tasks.create("t1", SPEC, _state("t1"))
    store.tasks.save_state(_state("t1", TaskStatus.running, step=3))
    record = store.tasks.get("t1")
    assert record is not None
    assert (record.state.status, record.state.step, record.spec_json) == (TaskStatus.running, 3, SPEC)
    store.tasks.save_state(_state("t1", TaskStatus.running, step=4), spec_json='{"new": 1}')
    assert store.tasks.get("t1").spec_json == '{"new": 1}'


def test_a_final_state_is_never_replaced_by_a_late_non_final_one(store: Store, db_url: str) -> None:
    store.tasks.create("t1", SPEC, _state("t1"))
    store.tasks.save_state(_state("t1", TaskStatus.completed, step=5).model_copy(update={"result": "done"}))
    late = Store.open(db_url)  # a retried activity in another process
    late.tasks.save_state(_state("t1", TaskStatus.running, step=4))
    record = store.tasks.get("t1")
    assert record is not None
    assert (record.state.status, record.state.result, record.state.step) == (TaskStatus.completed, "done", 5)
    assert [s.task_id for s in store.tasks.list(status="running")] == []

    # A final state may still be corrected by another final one.
    late.tasks.save_state(_state("t1", TaskStatus.failed, step=5).model_copy(update={"error": "boom"}))
    assert store.tasks.get("t1").state.status is TaskStatus.failed
    late.close()

    # The rule holds when the final state was written without a create first.
    store.tasks.save_state(_state("t2", TaskStatus.cancelled))
    store.tasks.save_state(_state("t2", TaskStatus.awaiting_budget))
    assert store.tasks.get("t2").state.status is TaskStatus.cancelled


def test_save_state_says_which_write_ended_the_task(store: Store, db_url: str) -> None:
    """The answer berth_tasks_ended_total counts by: True only for the write that made the row final, so a
    retried write of the end, or another writer's (a second store on the same database), counts nothing."""
    store.tasks.create("t-end", SPEC, _state("t-end"))
    assert store.tasks.save_state(_state("t-end", TaskStatus.running)) is False
    assert store.tasks.save_state(_state("t-end", TaskStatus.completed, step=3)) is True
    assert store.tasks.save_state(_state("t-end", TaskStatus.completed, step=3)) is False  # a retry
    other = Store.open(db_url)
    try:
        assert other.tasks.save_state(_state("t-end", TaskStatus.failed)) is False
        assert other.tasks.save_state(_state("t-end", TaskStatus.running)) is False
    finally:
        other.close()
    assert store.tasks.save_state(_state("t-new", TaskStatus.cancelled)) is True  # a row made final at once
    assert store.tasks.save_state(_state("t-queued")) is False


def test_list_filters_and_pages_newest_first(store: Store) -> None:
    specs = [
        ("a", "acme", "writer", None, TaskStatus.running),
        ("b", "acme", "coder", None, TaskStatus.completed),
        ("c", "beta", "writer", None, TaskStatus.running),
        ("d", "acme", "writer", "a", TaskStatus.queued),
        ("e", "acme", "writer", "a", TaskStatus.running),
    ]
    for task_id, tenant, agent, parent, status in specs:
        store.tasks.create(task_id, SPEC, _state(task_id, status, tenant=tenant, agent=agent, parent=parent))

    def ids(**filters: object) -> list[str]:
        return [s.task_id for s in store.tasks.list(**filters)]

    assert ids() == ["e", "d", "c", "b", "a"]
    assert ids(tenant="acme") == ["e", "d", "b", "a"]
    assert ids(status="running") == ["e", "c", "a"]
    assert ids(status=TaskStatus.running, tenant="acme") == ["e", "a"]
    assert ids(agent="coder") == ["b"]
    assert ids(parent_task_id="a") == ["e", "d"]
    assert ids(tenant="acme", agent="writer", parent_task_id="a", status="queued") == ["d"]
    assert ids(tenant="nobody") == []
    assert ids(limit=2) == ["e", "d"]
    assert ids(limit=2, offset=2) == ["c", "b"]
    assert ids(limit=2, offset=4) == ["a"]
    # Updating a task does not move it in the list.
    store.tasks.save_state(_state("a", TaskStatus.running, step=9).model_copy(
        update={"updated_at": datetime.now(UTC) + timedelta(hours=1)}))  # fmt: skip
    assert ids() == ["e", "d", "c", "b", "a"]
    with pytest.raises(ValueError):
        store.tasks.list(limit=-1)
