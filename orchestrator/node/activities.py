"""The node's Temporal activities: load, unload and prewarm replicas, on the queue `node/<node_id>`.

They run only on this node's worker, because the replica they start or stop is a process on
this machine. A load heartbeats at every readiness probe, so the caller's heartbeat timeout
tells a dead node apart from a slow load (a 70B model takes minutes and that is fine); a load
whose process dies fails at once with the replica's log tail instead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.step.spans import annotate_load
from orchestrator.node.replicas import Replica, ReplicaLoadError, ReplicaManager
from orchestrator.node.weights_cache import WeightsCacheError
from sdk.wire.node_io import (
    LOAD_REPLICA,
    PREWARM,
    UNLOAD_REPLICA,
    LoadedTier,
    LoadProgress,
    LoadReplica,
    Prewarm,
    PrewarmProgress,
    ReplicaReady,
    UnloadReplica,
)


def _heartbeat(replica: Replica) -> None:
    activity.heartbeat(LoadProgress(replica_id=replica.replica_id, state=replica.state))


class NodeActivities:
    """The activities of one node agent, bound to its replica manager."""

    def __init__(self, replicas: ReplicaManager) -> None:
        self.replicas = replicas

    @activity.defn(name=LOAD_REPLICA)
    async def load_replica(self, req: LoadReplica) -> ReplicaReady:
        try:
            replica = await self.replicas.load(
                req.model, tuple(req.gpu_indexes), req.replica_id, req.tier, on_progress=_heartbeat
            )
        except (ReplicaLoadError, WeightsCacheError, ValueError) as exc:
            # Retrying the same load on the same node fails the same way; the caller places it elsewhere.
            raise ApplicationError(str(exc), type=type(exc).__name__, non_retryable=True) from exc
        assert replica.handle is not None
        tier: LoadedTier = replica.tier
        annotate_load(req.model.name, replica.replica_id, req.gpu_indexes, tier, replica.load_seconds)
        return ReplicaReady(
            replica_id=replica.replica_id,
            base_url=replica.handle.base_url,
            load_seconds=replica.load_seconds,
            tier=tier,
        )

    @activity.defn(name=UNLOAD_REPLICA)
    async def unload_replica(self, req: UnloadReplica) -> None:
        # Unloading a replica the node does not have is done already (a retried unload, a restarted node).
        await self.replicas.unload(req.replica_id, req.grace_s)

    @activity.defn(name=PREWARM)
    async def prewarm(self, req: Prewarm) -> str:
        try:
            return await self.replicas.prewarm(
                req.model,
                req.size_bytes,
                req.tier,
                on_progress=lambda: activity.heartbeat(PrewarmProgress(model=req.model.name)),
            )
        except (WeightsCacheError, ValueError) as exc:
            raise ApplicationError(str(exc), type=type(exc).__name__, non_retryable=True) from exc

    def all(self) -> list[Callable[..., Any]]:
        return [self.load_replica, self.unload_replica, self.prewarm]
