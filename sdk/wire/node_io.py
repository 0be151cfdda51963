"""What the control plane asks of a GPU node agent, as Temporal activity inputs and outputs.

Each node polls a task queue of its own (`node/<node_id>`): a replica lives on one machine, so
the activity that starts or stops it must run on that machine and nowhere else (the
worker-specific task queue pattern). One input model per activity lets fields be added later
without breaking workflows already running.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from .catalogue import ModelEntry

LOAD_REPLICA = "berth.node.load_replica"
UNLOAD_REPLICA = "berth.node.unload_replica"
PREWARM = "berth.node.prewarm"

# Where weights come from when they are not on the node's disk yet (the pool's locality tiers).
FetchSource = Literal["datacenter", "origin"]
# Where a load actually read its weights from: "disk" when the node's cache had them.
LoadedTier = Literal["warm", "disk", "datacenter", "origin"]

_STRICT = ConfigDict(extra="forbid")


def node_task_queue(node_id: str) -> str:
    """The task queue only `node_id`'s agent polls."""
    return f"node/{node_id}"


class LoadReplica(BaseModel):
    """Start a replica of `model` on `gpu_indexes` (one tensor-parallel gang) and wait until it serves."""

    model_config = _STRICT

    model: ModelEntry
    gpu_indexes: list[int] = Field(min_length=1, max_length=8)
    replica_id: str = Field(min_length=1, max_length=128)
    tier: FetchSource = Field(default="origin", description="where to fetch weights the node's disk lacks")


class ReplicaReady(BaseModel):
    """A replica that lists its model: leases may route to `base_url` (ends in /v1)."""

    replica_id: str
    base_url: str
    load_seconds: float
    tier: LoadedTier


class LoadProgress(BaseModel):
    """A replica load's heartbeat: which replica, and the state it is in (starting, loading, warm)."""

    replica_id: str
    state: str


class PrewarmProgress(BaseModel):
    """A prewarm's heartbeat: weights of `model` are still arriving on the node's disk."""

    model: str


class UnloadReplica(BaseModel):
    """Stop a replica; its weights stay in the node's disk cache."""

    model_config = _STRICT

    replica_id: str = Field(min_length=1, max_length=128)
    grace_s: float = Field(default=10.0, ge=0, le=600)


class Prewarm(BaseModel):
    """Put `model`'s weights on the node's disk (not in GPU memory) so a later load is a disk load."""

    model_config = _STRICT

    model: ModelEntry
    size_bytes: int | None = Field(default=None, gt=0, description="the weights' size; from the entry by default")
    tier: FetchSource = "origin"


# The control plane's workflows that run one node activity each (workflows/fleet_ops.py). A
# workflow, not a bare activity call, so a load outlives the API request or scaler tick that
# asked for it and its outcome stays in history.
LOAD_WORKFLOW = "berth.fleet.load"
UNLOAD_WORKFLOW = "berth.fleet.unload"
PREWARM_WORKFLOW = "berth.fleet.prewarm"


class LoadOnNode(BaseModel):
    """Load a replica on one node: the node to run it on, and what to load."""

    model_config = _STRICT

    node_id: str = Field(min_length=1, max_length=128)
    request: LoadReplica


class UnloadOnNode(BaseModel):
    """Unload a replica from the node that runs it."""

    model_config = _STRICT

    node_id: str = Field(min_length=1, max_length=128)
    request: UnloadReplica


class PrewarmOnNode(BaseModel):
    """Put a model's weights on one node's disk."""

    model_config = _STRICT

    node_id: str = Field(min_length=1, max_length=128)
    request: Prewarm
