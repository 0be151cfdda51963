"""Fleet operations: load, unload or prewarm on one node, each a workflow around one node activity.

Each runs its activity on `node/<node_id>`, the queue only that node's agent polls (the
worker-specific task queue pattern): a replica is a process on one machine, so the call that
starts or stops it must run there and nowhere else. They are workflows rather than bare
activity calls so that a load outlives whatever asked for it (an API request, a scaler tick)
and its outcome stays in history for whoever looks later.

Failure behaviour, which the timeouts below encode:
- a node that stops heartbeating is gone (load and prewarm heartbeat at every probe or chunk),
  so the heartbeat timeout is short while start-to-close is as long as the slowest legitimate
  transfer;
- a node that never picks the activity up is gone or wedged: schedule-to-start fails the call
  (Temporal does not retry that timeout) instead of letting it wait for a node that left;
- the node agent marks an error that would repeat on this node (bad weights, no disk room, a
  replica process that crashes) non-retryable; that stops the retries, and the workflow fails
  with the node's own message so the caller can place the work elsewhere.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TypeVar

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from sdk.wire.node_io import (
        LOAD_REPLICA,
        LOAD_WORKFLOW,
        PREWARM,
        PREWARM_WORKFLOW,
        UNLOAD_REPLICA,
        UNLOAD_WORKFLOW,
        LoadOnNode,
        PrewarmOnNode,
        ReplicaReady,
        UnloadOnNode,
        node_task_queue,
    )

# Load and prewarm heartbeat every few seconds (each readiness probe, each chunk of weights);
# 30 s of silence means the node agent or its machine is gone, not that the load is slow.
NODE_HEARTBEAT = timedelta(seconds=30)
# A node's agent polls its queue all the time; one that has not picked a call up in this long
# has left the fleet or is stuck, and waiting longer only delays placing the work elsewhere.
NODE_PICKUP = timedelta(minutes=5)
# A 70B model is 140 GB: from origin at ~200 MB/s that is ~12 min, plus engine start and
# CUDA graph capture; 30 min covers a slow WAN without hiding a hung load (heartbeats do that).
LOAD_TIMEOUT = timedelta(minutes=30)
# Prewarm moves weights to disk only, but may pull the largest models over a slow WAN.
PREWARM_TIMEOUT = timedelta(hours=2)
# An unload waits up to the request's grace period for in-flight requests, then stops the process.
UNLOAD_MARGIN = timedelta(seconds=60)
# A few attempts ride out a node agent restart; an error that would repeat is non-retryable at the node.
NODE_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=5),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(minutes=1),
    maximum_attempts=3,
)
# Unload is idempotent on the node (an unknown replica is already unloaded), so retry a little more.
UNLOAD_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=2),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=30),
    maximum_attempts=5,
)


T = TypeVar("T")


def _node_failure(exc: ActivityError, what: str, node_id: str) -> ApplicationError:
    """The node's own error as the workflow's failure, so callers read its message, not "activity failed"."""
    cause = exc.cause
    if isinstance(cause, ApplicationError):
        return ApplicationError(cause.message, type=cause.type, non_retryable=True)
    return ApplicationError(
        f"{what} on node {node_id} failed: {cause or exc}", type="NodeCallFailed", non_retryable=True
    )


async def _heartbeating_on_node(
    activity: str, request: object, node_id: str, result_type: type[T], timeout: timedelta, what: str
) -> T:
    """Run a long node activity that heartbeats (load, prewarm); the node's error becomes the workflow's."""
    try:
        return await workflow.execute_activity(
            activity,
            request,
            task_queue=node_task_queue(node_id),
            result_type=result_type,
            schedule_to_start_timeout=NODE_PICKUP,
            start_to_close_timeout=timeout,
            heartbeat_timeout=NODE_HEARTBEAT,
            retry_policy=NODE_RETRY,
        )
    except ActivityError as exc:
        raise _node_failure(exc, what, node_id) from exc


@workflow.defn(name=LOAD_WORKFLOW)
class ReplicaLoadWorkflow:
    """Load one replica on one node and return where it serves."""

    @workflow.run
    async def run(self, order: LoadOnNode) -> ReplicaReady:
        return await _heartbeating_on_node(
            LOAD_REPLICA,
            order.request,
            order.node_id,
            ReplicaReady,
            LOAD_TIMEOUT,
            f"loading {order.request.replica_id}",
        )


@workflow.defn(name=UNLOAD_WORKFLOW)
class ReplicaUnloadWorkflow:
    """Unload one replica from its node; its weights stay in the node's disk cache."""

    @workflow.run
    async def run(self, order: UnloadOnNode) -> None:
        try:
            await workflow.execute_activity(
                UNLOAD_REPLICA,
                order.request,
                task_queue=node_task_queue(order.node_id),
                schedule_to_start_timeout=NODE_PICKUP,
                # Unload does not heartbeat: it is bounded by its own grace period instead.
                start_to_close_timeout=timedelta(seconds=order.request.grace_s) + UNLOAD_MARGIN,
                retry_policy=UNLOAD_RETRY,
            )
        except ActivityError as exc:
            raise _node_failure(exc, f"unloading {order.request.replica_id}", order.node_id) from exc


@workflow.defn(name=PREWARM_WORKFLOW)
class PrewarmWorkflow:
    """Put a model's weights on one node's disk; returns the tier they came from."""

    @workflow.run
    async def run(self, order: PrewarmOnNode) -> str:
        return await _heartbeating_on_node(
            PREWARM, order.request, order.node_id, str, PREWARM_TIMEOUT, f"prewarming {order.request.model.name}"
        )
