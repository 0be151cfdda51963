"""Task ends, budget exhaustion and preemption metrics, recorded by the record_state activity from the events the
workflow hands it, and tool-call metrics, recorded with the step (read through an in-memory metric reader)."""

from __future__ import annotations

import uuid

from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from activities.bookkeeping import TaskBookkeeping
from orchestrator.store import Store
from sdk import Message, Spend, TaskState, TaskStatus, ToolCall
from sdk.wire.contracts import CheckpointInput, PendingStep, RecordStateInput


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


def test_a_task_end_counts_once_by_outcome_however_often_it_is_written(
    store: Store, metrics_reader: InMemoryMetricReader
) -> None:
    """A local activity retried after a lost reply, or a second worker's books on the same store, write the same
    end again: the store says only the first write ended the task."""
    model = f"m-{uuid.uuid4().hex[:8]}"
    books = TaskBookkeeping(store.checkpoints, store.tasks, store.events, store.agents)
    again = TaskBookkeeping(store.checkpoints, store.tasks, store.events, store.agents)
    books.record_state(RecordStateInput(state=state(model, TaskStatus.running)))
    for writer in (books, books, again):
        writer.record_state(RecordStateInput(state=state(model, TaskStatus.out_of_budget)))

    [ended] = points(metrics_reader, "berth_tasks_ended", model)
    assert ended.value == 1
    assert dict(ended.attributes) == {"outcome": "out_of_budget", "tenant": "acme", "agent": "writer", "model": model}


def test_tool_calls_and_failures_count_once_per_recorded_step_with_bounded_names(
    store: Store, metrics_reader: InMemoryMetricReader
) -> None:
    agent = f"agent-{uuid.uuid4().hex[:8]}"
    books = TaskBookkeeping(store.checkpoints, store.tasks, store.events, store.agents)
    task = state("m", TaskStatus.running).model_copy(update={"task_id": f"t-{agent}", "agent": agent})
    root = store.checkpoints.write_root(task.task_id, [Message(role="user", content="hi")], {})
    calls = [ToolCall(id=f"c{i}", name=name) for i, name in enumerate(("lookup", "lookup", "made_up"))]
    step = [
        Message(role="assistant", tool_calls=calls),
        Message(role="tool", tool_call_id="c0", name="lookup", content="a word"),
        Message(role="tool", tool_call_id="c1", name="lookup", content="tool error: lookup failed after 3 attempt(s)"),
        Message(role="tool", tool_call_id="c2", name="made_up", content="tool error: unknown tool 'made_up'"),
    ]
    flush = CheckpointInput(
        task_id=task.task_id, parent=root, pending=PendingStep(step=1, new_messages=step, state=task)
    )
    books.checkpoint(flush)
    books.checkpoint(flush)  # retried: the same checkpoint, counted once

    def counted(name: str) -> dict[str, float]:
        return {
            p.attributes["tool"]: p.value
            for rm in metrics_reader.get_metrics_data().resource_metrics
            for sm in rm.scope_metrics
            for m in sm.metrics
            if m.name == name
            for p in m.data.data_points
            if p.attributes.get("agent") == agent
        }

    assert counted("berth_tool_calls") == {"lookup": 2, "other": 1}
    assert counted("berth_tool_call_failures") == {"lookup": 1, "other": 1}
