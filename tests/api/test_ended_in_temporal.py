"""A real AgentTaskWorkflow ended outside Berth (`temporal workflow terminate`) never leaves its row unfinished: the
reconciler writes its final state, and the sub-agent its parent's end took with it (Temporal's parent close policy)
ends too, each saying how. The real worker, engine and store of the `stack` fixture; the reconciler's rounds are
driven by the test, each a bounded poll for the state it writes."""

from __future__ import annotations

import asyncio
import time

import pytest
from api_helpers import Stack, unique
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from temporalio.client import Client as TemporalClient

from orchestrator.reconcile import Reconciler
from sdk import Agent, Budget, TaskFailed, TaskHandle, TaskStatus

WAIT_S = 120.0


async def _until_status(task: TaskHandle, status: TaskStatus) -> None:
    deadline = time.monotonic() + WAIT_S
    while (await task.status()).status != status:
        assert time.monotonic() < deadline, f"{task.task_id} never reached {status.value}"
        await asyncio.sleep(0.1)


async def test_a_task_and_its_sub_agent_terminated_in_temporal_end_failed_saying_so(
    stack: Stack, temporal_client: TemporalClient, metrics_reader: InMemoryMetricReader
) -> None:
    lead = Agent(unique("lead"), "llama-3.2-1b", "Ask first.", allow_ask_human=True)
    helper = Agent(unique("helper"), "llama-3.2-1b", "Ask first.", allow_ask_human=True)
    await stack.client.register(lead)
    await stack.client.register(helper)
    task = await stack.client.submit(lead, "ask: shall I start?", budget=Budget(tokens=20_000))
    await _until_status(task, TaskStatus.awaiting_input)
    child = await task.spawn(helper.name, "ask: which source first?", tokens=5_000)
    await _until_status(child, TaskStatus.awaiting_input)

    await temporal_client.get_workflow_handle(task.task_id).terminate(reason="rolled back by ops")

    async def client() -> TemporalClient:
        return temporal_client

    reconciler = Reconciler(stack.store, client, holder=unique("test-replica"), batch=10)
    deadline = time.monotonic() + WAIT_S
    while not all(stack.store.tasks.get(t.task_id).state.status.is_final for t in (task, child)):
        assert time.monotonic() < deadline, "the rows never ended"
        await reconciler.sweep()
        await asyncio.sleep(0.2)

    parent, sub = await task.status(), await child.status()
    assert parent.status == sub.status == TaskStatus.failed
    assert parent.error == f"its workflow was terminated in Temporal by {temporal_client.identity}: rolled back by ops"
    assert sub.error is not None and sub.error.startswith("its workflow was terminated in Temporal")
    assert "parent close policy" in sub.error  # Temporal's own word for why the sub-agent ended
    assert parent.waiting_for is None and parent.question is None and parent.spend.tokens_used > 0
    with pytest.raises(TaskFailed, match="terminated in Temporal"):
        await task.result(timeout=10)
    # Each ends once: another round finds nothing left to do.
    again = await reconciler.sweep()
    assert task.task_id not in again.compared and again.ended == []
    # And counts once, by the reconciler's write of its end (berth_tasks_ended_total; the agents are this test's own).
    ended = {
        p.attributes["agent"]: (p.attributes["outcome"], p.value)
        for rm in metrics_reader.get_metrics_data().resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
        if m.name == "berth_tasks_ended"
        for p in m.data.data_points
        if p.attributes["agent"] in (lead.name, helper.name)
    }
    assert ended == {lead.name: ("failed", 1), helper.name: ("failed", 1)}
