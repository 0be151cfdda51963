"""No lease outlives its task's end (issue 34, item 7): a task whose workflow ended in Temporal without releasing
its step's lease (terminated; or failed, as one stuck on an oversized payload was) gets its lease released when the
reconciler writes its end. Before, the lease stayed until the pool's restart or the node's loss (~45 minutes in
the finding), and the node it named could still read and book the ended task's step."""

from __future__ import annotations

import asyncio
import time

from api_helpers import Stack, unique
from temporalio.client import Client as TemporalClient

from orchestrator.reconcile import Reconciler
from orchestrator.store import LeaseRecord
from sdk import Agent, Budget, TaskHandle, TaskStatus
from sdk.wire.lease import StepLimits

WAIT_S = 120.0


async def _until_status(task: TaskHandle, status: TaskStatus) -> None:
    deadline = time.monotonic() + WAIT_S
    while (await task.status()).status != status:
        assert time.monotonic() < deadline, f"{task.task_id} never reached {status.value}"
        await asyncio.sleep(0.1)


def _lease(task_id: str, step: int) -> LeaseRecord:
    """The lease a pool would hold for the task's step on a GPU node."""
    return LeaseRecord(
        lease_id=unique("lease"),
        task_id=task_id,
        step=step,
        model="llama-3.2-1b",
        node_id=unique("node"),
        replica_id=unique("replica"),
        tokens=1024,
        tenant="default",
        pool_id="pool-a",
        limits=StepLimits(max_tokens=1024, token_allowance=20_000),
    )


async def test_a_task_whose_workflow_ended_in_temporal_releases_the_leases_it_held(
    stack: Stack, temporal_client: TemporalClient
) -> None:
    agent = Agent(unique("asker"), "llama-3.2-1b", "Ask first.", allow_ask_human=True)
    await stack.client.register(agent)
    task = await stack.client.submit(agent, "ask: shall I start?", budget=Budget(tokens=20_000))
    await _until_status(task, TaskStatus.awaiting_input)
    other = await stack.client.submit(agent, "ask: and this one?", budget=Budget(tokens=20_000))
    held = stack.store.leases.add(_lease(task.task_id, 2))
    kept = stack.store.leases.add(_lease(other.task_id, 2))

    await temporal_client.get_workflow_handle(task.task_id).terminate(reason="rolled back by ops")

    async def client() -> TemporalClient:
        return temporal_client

    reconciler = Reconciler(stack.store, client, holder=unique("test-replica"), batch=10)
    deadline = time.monotonic() + WAIT_S
    while not stack.store.tasks.get(task.task_id).state.status.is_final:
        assert time.monotonic() < deadline, "the row never ended"
        await reconciler.sweep()
        await asyncio.sleep(0.2)

    assert (await task.status()).status == TaskStatus.failed
    assert stack.store.leases.get(held.lease_id) is None
    assert stack.store.leases.get(kept.lease_id) is not None  # a running task's lease stays
    stack.store.leases.release(kept.lease_id)
    await other.cancel()
