"""Latency objectives survive the store: a tenant's (only the fields it sets, changed field by field), an agent's in
its registered spec, and a task's own in its spec and its resolved ones in its state."""

from __future__ import annotations

import pytest

from orchestrator.store import Store, TaskConflict
from sdk import AgentSpec, LatencyObjectives, Spend, TaskSpec, TaskState, TaskStatus
from sdk.wire.identity import TenantSpec, TenantUpdate

pytestmark = pytest.mark.postgresql  # the store's SQL must mean the same on SQLite and PostgreSQL


def test_a_tenants_objectives_are_kept_changed_field_by_field_and_cleared(store: Store, db_url: str) -> None:
    store.tenants.create(TenantSpec(name="acme", objectives=LatencyObjectives(ttft_s=2.0, tpot_s=0.1)))
    store.tenants.update("acme", TenantUpdate.model_validate({"objectives": {"attainment": 0.95, "tpot_s": None}}))
    store.tenants.update("acme", TenantUpdate(gpu_quota=2))  # a change without objectives keeps them
    again = Store.open(db_url)  # another process, or the same one after a restart
    try:
        kept = again.tenants.get("acme")
        assert kept is not None and kept.objectives == LatencyObjectives(ttft_s=2.0, attainment=0.95)
        # Read back, the layer sets only what was given: its unset fields inherit, not clear.
        assert kept.objectives.model_fields_set == {"ttft_s", "attainment"}
        assert [t.objectives for t in again.tenants.list() if t.name == "default"] == [None]
    finally:
        again.close()
    assert store.tenants.update("acme", TenantUpdate.model_validate({"objectives": None})).objectives is None
    assert store.tenants.get("acme").objectives is None  # type: ignore[union-attr]  # made above


def test_an_agents_objectives_are_part_of_its_registered_version(store: Store) -> None:
    plain = store.agents.register(AgentSpec(name="writer", model="m"))
    strict = store.agents.register(AgentSpec(name="writer", model="m", objectives=LatencyObjectives(ttft_s=0.4)))
    assert strict.version != plain.version
    assert store.agents.get("writer").objectives == LatencyObjectives(ttft_s=0.4)  # type: ignore[union-attr]
    assert store.agents.get("writer", plain.version).objectives is None  # type: ignore[union-attr]


def test_a_tasks_own_and_resolved_objectives_are_read_back_and_listed(store: Store) -> None:
    spec = TaskSpec(task_id="t-1", agent="a", input="x", budget={"tokens": 100}, objectives={"tpot_s": 0.02})
    resolved = LatencyObjectives(ttft_s=1.0, tpot_s=0.02, attainment=0.99)
    state = TaskState(
        task_id="t-1",
        agent="a",
        agent_version="v1",
        model="m",
        tenant="default",
        status=TaskStatus.queued,
        max_steps=3,
        spend=Spend(token_limit=100),
        objectives=resolved,
    )
    assert store.tasks.create("t-1", spec.model_dump_json(), state)
    record = store.tasks.get("t-1")
    assert record is not None and record.state.objectives == resolved
    assert TaskSpec.model_validate_json(record.spec_json or "").objectives == LatencyObjectives(tpot_s=0.02)
    assert [s.objectives for s in store.tasks.list()] == [resolved]
    # Resubmitting with other objectives is another spec.
    other = spec.model_copy(update={"objectives": LatencyObjectives(tpot_s=0.03)})
    with pytest.raises(TaskConflict):
        store.tasks.create("t-1", other.model_dump_json(), state)
