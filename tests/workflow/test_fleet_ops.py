"""The fleet-op workflows on a real dev server: each runs its activity on the node's own queue.

The node here is a fake registered under the real activity names (the real node agent and its
replica manager are tested in tests/unit/test_node_*); what is checked is the routing to
`node/<id>`, the results coming back typed, and a node's non-retryable error failing the
workflow with the node's own message after one attempt.
"""

from __future__ import annotations

import uuid
from collections import Counter

import pytest
from temporalio import activity
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from sdk.wire.catalogue import ModelEntry
from sdk.wire.node_io import (
    LOAD_REPLICA,
    LOAD_WORKFLOW,
    PREWARM,
    PREWARM_WORKFLOW,
    UNLOAD_REPLICA,
    UNLOAD_WORKFLOW,
    LoadOnNode,
    LoadReplica,
    Prewarm,
    PrewarmOnNode,
    ReplicaReady,
    UnloadOnNode,
    UnloadReplica,
    node_task_queue,
)
from workflows.fleet_ops import PrewarmWorkflow, ReplicaLoadWorkflow, ReplicaUnloadWorkflow

MODEL = ModelEntry(name="llama-3.1-8b", weights_gib=16, kv_headroom_gib=4)
BROKEN = "broken-weights"  # the fake node refuses this replica id / model name, as the real one does bad weights


class FakeNode:
    """A node agent that records what it was asked and answers at once."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.unloaded: list[str] = []

    @activity.defn(name=LOAD_REPLICA)
    async def load_replica(self, req: LoadReplica) -> ReplicaReady:
        self.calls[LOAD_REPLICA] += 1
        activity.heartbeat({"replica_id": req.replica_id, "state": "loading"})
        if req.replica_id == BROKEN:
            raise ApplicationError(
                f"replica {req.replica_id} exited during load: bad safetensors header",
                type="ReplicaLoadError",
                non_retryable=True,
            )
        return ReplicaReady(
            replica_id=req.replica_id, base_url="http://127.0.0.1:9000/v1", load_seconds=1.5, tier=req.tier
        )

    @activity.defn(name=UNLOAD_REPLICA)
    async def unload_replica(self, req: UnloadReplica) -> None:
        self.calls[UNLOAD_REPLICA] += 1
        self.unloaded.append(req.replica_id)

    @activity.defn(name=PREWARM)
    async def prewarm(self, req: Prewarm) -> str:
        self.calls[PREWARM] += 1
        if req.model.name == BROKEN:
            raise ApplicationError(
                f"no room for {req.model.name} in the weights cache", type="WeightsCacheError", non_retryable=True
            )
        return req.tier


@pytest.fixture
async def fleet_ops(temporal_env: WorkflowEnvironment):
    """(client, control queue, node id, fake node) with both workers running."""
    client: Client = temporal_env.client
    queue = f"fleet-{uuid.uuid4().hex[:8]}"
    node_id = f"gpu-{uuid.uuid4().hex[:8]}"
    node = FakeNode()
    async with (
        Worker(client, task_queue=queue, workflows=[ReplicaLoadWorkflow, ReplicaUnloadWorkflow, PrewarmWorkflow]),
        Worker(
            client,
            task_queue=node_task_queue(node_id),
            activities=[node.load_replica, node.unload_replica, node.prewarm],
        ),
    ):
        yield client, queue, node_id, node


def _id(kind: str) -> str:
    return f"{kind}-{uuid.uuid4().hex[:8]}"


async def test_load_runs_on_the_nodes_queue_and_returns_where_the_replica_serves(fleet_ops) -> None:
    client, queue, node_id, node = fleet_ops
    order = LoadOnNode(
        node_id=node_id, request=LoadReplica(model=MODEL, gpu_indexes=[0], replica_id="r-1", tier="datacenter")
    )
    ready = await client.execute_workflow(
        LOAD_WORKFLOW, order, id=_id("load"), task_queue=queue, result_type=ReplicaReady
    )
    assert ready == ReplicaReady(
        replica_id="r-1", base_url="http://127.0.0.1:9000/v1", load_seconds=1.5, tier="datacenter"
    )
    assert node.calls[LOAD_REPLICA] == 1


async def test_a_non_retryable_load_error_fails_the_workflow_with_the_nodes_message(fleet_ops) -> None:
    client, queue, node_id, node = fleet_ops
    order = LoadOnNode(node_id=node_id, request=LoadReplica(model=MODEL, gpu_indexes=[0, 1], replica_id=BROKEN))
    with pytest.raises(WorkflowFailureError) as failed:
        await client.execute_workflow(LOAD_WORKFLOW, order, id=_id("load"), task_queue=queue, result_type=ReplicaReady)
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError)
    assert "bad safetensors header" in cause.message and cause.type == "ReplicaLoadError"
    assert node.calls[LOAD_REPLICA] == 1, "a non-retryable error is not retried"


async def test_unload_runs_on_the_node(fleet_ops) -> None:
    client, queue, node_id, node = fleet_ops
    order = UnloadOnNode(node_id=node_id, request=UnloadReplica(replica_id="r-7", grace_s=0))
    assert await client.execute_workflow(UNLOAD_WORKFLOW, order, id=_id("unload"), task_queue=queue) is None
    assert node.unloaded == ["r-7"]


async def test_prewarm_returns_the_tier_and_propagates_a_cache_error(fleet_ops) -> None:
    client, queue, node_id, node = fleet_ops
    order = PrewarmOnNode(node_id=node_id, request=Prewarm(model=MODEL, tier="datacenter"))
    assert (
        await client.execute_workflow(PREWARM_WORKFLOW, order, id=_id("prewarm"), task_queue=queue, result_type=str)
        == "datacenter"
    )
    broken = ModelEntry(name=BROKEN, weights_gib=16)
    with pytest.raises(WorkflowFailureError) as failed:
        await client.execute_workflow(
            PREWARM_WORKFLOW,
            PrewarmOnNode(node_id=node_id, request=Prewarm(model=broken)),
            id=_id("prewarm"),
            task_queue=queue,
            result_type=str,
        )
    assert isinstance(failed.value.cause, ApplicationError)
    assert "no room for broken-weights" in failed.value.cause.message
    assert node.calls[PREWARM] == 2
