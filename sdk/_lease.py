"""A step's worker lease: what the workflow asks the pool for, and what the pool answers.

A step asks before every model call. The pool answers with one of four outcomes:
- `placed`: run on `node_id`'s queue against `replica_id`; when `load` is set the replica is
  not serving yet and the step first waits for it on that node (loads are idempotent per
  replica id, so every lease on a loading replica waits on the same load);
- `wait`: nothing can serve now; `reason`, `wait_reason` and `queue_position` say why and
  where the task stands, and the step asks again;
- `never`: no node of this fleet could ever serve it; the task fails with `reason`;
- `direct`: the model is not served by the fleet (a hosted provider, or a stack run without
  GPU nodes), so the step calls it from the control queue without a lease.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from ._node_io import LoadReplica

ServiceClass = Literal["interactive", "batch", "low_priority"]
LeaseOutcome = Literal["placed", "wait", "never", "direct"]
LocalityTier = Literal["warm", "loading", "disk", "datacenter", "origin"]
WaitReason = Literal["no_capacity", "cold_start", "busy", "tenant_quota", "low_priority", "queued"]

ACQUIRE_LEASE = "berth.pool.acquire"
RELEASE_LEASE = "berth.pool.release"


class LeaseRequest(BaseModel):
    task_id: str
    step: int = Field(ge=1)
    model: str
    tokens: int = Field(ge=1, description="completion tokens this step may generate: its load on the replica")
    prompt_tokens: int = Field(default=0, ge=0, description="the step's prompt as far as the task knows it (what its"
                                                            " previous step's prompt and answer held): prefix affinity"
                                                            " and prefill time weigh it")
    tenant: str = "default"
    priority: int = Field(default=0, ge=0, le=9, description="higher goes first in the wait queue")
    service_class: ServiceClass = "interactive"
    exclude_nodes: list[str] = Field(default_factory=list)
    avoid_spot_zones: list[str] = Field(
        default_factory=list, description="zones whose spot capacity was reclaimed under this step: their spot"
                                          " nodes are used only when nothing else can serve")
    previous_replica: str | None = Field(default=None, description="served the previous step: prefix affinity")


class LeaseGrant(BaseModel):
    outcome: LeaseOutcome
    lease_id: str | None = None
    node_id: str | None = None
    replica_id: str | None = None
    gpu_indexes: list[int] = Field(default_factory=list)
    gpu_type: str | None = None
    zone: str | None = None
    capacity: Literal["on-demand", "spot"] | None = None
    tier: LocalityTier | None = None
    load: LoadReplica | None = Field(default=None, description="set while the replica still has to be loaded")
    usd_per_1m_prompt: float | None = None
    usd_per_1m_completion: float | None = None
    expected_ttft_s: float | None = None
    decided_by: str | None = Field(default=None, description="the score term that chose this placement")
    reason: str | None = None
    wait_reason: WaitReason | None = None
    queue_position: int | None = Field(default=None, description="1 = next to be served, for `wait`")

    @property
    def served_by(self) -> str:
        return f"{self.node_id}/{self.replica_id}" if self.node_id else ""


class ReleaseLease(BaseModel):
    lease_id: str
    replica_warm: bool = Field(default=False, description="the step was served: the replica is warm now")
    replica_gone: bool = Field(default=False, description="the node no longer has the replica: stop placing on it")


class StepPlacement(BaseModel):
    """Where a step ran and what it waited for, recorded with its model call (ledger event, UI timeline)."""

    node_id: str
    replica_id: str
    gpu_indexes: list[int]
    gpu_type: str | None = None
    tier: LocalityTier
    decided_by: str | None = None
    queue_wait_s: float = Field(default=0.0, description="from the first acquire to the lease")
    load_s: float = Field(default=0.0, description="waiting for the replica to load")
