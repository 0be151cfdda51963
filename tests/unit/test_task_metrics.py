"""Budget exhaustion and preemption metrics, recorded by the record_state activity from the events the
workflow hands it (read through an in-memory metric reader)."""

from __future__ import annotations

import uuid

from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from activities.bookkeeping import TaskBookkeeping
from orchestrator.store import Store
from sdk import Spend, TaskState, TaskStatus
from sdk.wire.contracts import RecordStateInput


def state(model: str, status: TaskStatus) -> TaskState:
    return TaskState(
        task_id="t-metrics",
        agent="writer",
        agent_version="1",
        model=model,
        tenant="acme",
        status=status,
        step=2,
        max_steps=5,
        spend=Spend(token_limit=5000, tokens_used=120),
    )


def points(reader: InMemoryMetricReader, name: str, model: str) -> list:
    """The data points of metric `name` that carry `model` (readings are cumulative over the session)."""
    data = reader.get_metrics_data()
    return [
        p
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
        if m.name == name
        for p in m.data.data_points
        if p.attributes.get("model") == model
    ]


def test_an_interruption_counts_a_preemption_and_records_its_time_to_resume(
    store: Store, metrics_reader: InMemoryMetricReader
) -> None:
    model = f"m-{uuid.uuid4().hex[:8]}"
    books = TaskBookkeeping(store.checkpoints, store.tasks, store.events, store.agents)
    details = {"step": 2, "node_id": "gpu-a", "kind": "spot_reclaim", "resume_s": 4.5, "resumed_on": "gpu-b"}
    books.record_state(RecordStateInput(state=state(model, TaskStatus.running), event="interruption", details=details))

    [counted] = points(metrics_reader, "berth_preemptions", model)
    assert counted.value == 1 and dict(counted.attributes) == {"model": model, "kind": "spot_reclaim", "node": "gpu-a"}
    [resume] = points(metrics_reader, "berth_resume_seconds", model)
    assert resume.count == 1 and resume.sum == 4.5
    assert points(metrics_reader, "berth_budget_exhausted", model) == []


def test_a_budget_running_out_counts_by_status(store: Store, metrics_reader: InMemoryMetricReader) -> None:
    model = f"m-{uuid.uuid4().hex[:8]}"
    books = TaskBookkeeping(store.checkpoints, store.tasks, store.events, store.agents)
    for status in (TaskStatus.running, TaskStatus.awaiting_budget, TaskStatus.out_of_budget):
        books.record_state(RecordStateInput(state=state(model, status)))

    counted = {p.attributes["status"]: p.value for p in points(metrics_reader, "berth_budget_exhausted", model)}
    assert counted == {"awaiting_budget": 1, "out_of_budget": 1}
    assert points(metrics_reader, "berth_preemptions", model) == []
