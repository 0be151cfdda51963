"""What placement is asked (PlacementRequest) and what it answers (Decision).

A Decision explains itself: every scorer term of the chosen candidate and the runner-up, the
term that decided between them, and when nothing fits, why — "never" (no node in this fleet
could ever serve it: fail the task now) apart from "wait" (busy, cold start, quota: queue it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from sdk.wire.objectives import LatencyObjectives

Priority = Literal["interactive", "batch", "low_priority"]
Tier = Literal["warm", "loading", "disk", "datacenter", "origin"]
Outcome = Literal["placed", "wait", "never"]
WaitReason = Literal["no_capacity", "cold_start", "busy", "tenant_quota", "low_priority"]

# Locality tiers from nearest to farthest: the tie-break after the score, and the UI's order.
TIER_ORDER: dict[str, int] = {"warm": 0, "loading": 1, "disk": 2, "datacenter": 3, "origin": 4}


@dataclass(frozen=True)
class PlacementRequest:
    model: str
    tokens: int  # reserved for this step: prompt + max_tokens (load is measured in tokens)
    prompt_tokens: int = 0
    tenant: str | None = None
    priority: Priority = "interactive"
    gpu_types: frozenset[str] | None = None  # None = any type
    tensor_parallel: tuple[int, ...] | None = None  # overrides the catalogue's allowed degrees
    exclude_nodes: frozenset[str] = frozenset()  # e.g. the node that just preempted this task
    exclude_zones: frozenset[str] = frozenset()
    # Spot capacity of these zones was just reclaimed under this task: a cloud reclaims a zone's spot
    # pool together, so its other spot nodes are likely next. On-demand nodes there are fine.
    exclude_spot_zones: frozenset[str] = frozenset()
    previous_replica: str | None = None  # served this task's previous step: its KV cache has the prefix
    new_replica_only: bool = False  # the scaler adding a replica: existing ones are not candidates
    # The model's scaling policy cap: once it has this many replicas (not draining), a step waits for a
    # slot instead of starting another, as the scaler never plans past it either. None: no cap.
    max_replicas: int | None = None
    # What the call promises (its class's defaults, or the task's own): placement prefers candidates
    # predicted to meet it. None: the class's defaults (sdk/wire/objectives.py).
    objectives: LatencyObjectives | None = None
    # The prompt a new replica is judged by: the larger of this call's and the model's recent high percentile,
    # since a replica started for one short prompt goes on to serve the model's long ones.
    traffic_prompt_tokens: int = 0


@dataclass(frozen=True)
class Candidate:
    """A warm/loading replica to lease from, or devices of one node for a new replica."""

    tier: Tier
    node_id: str
    devices: tuple[int, ...]
    replica_id: str | None = None  # None → a new replica

    @property
    def sort_key(self) -> tuple[int, str, tuple[int, ...], str]:
        return (TIER_ORDER[self.tier], self.node_id, self.devices, self.replica_id or "")


@dataclass(frozen=True)
class ScoredCandidate:
    candidate: Candidate
    terms: dict[str, float]  # each scorer's raw value in its own unit
    contributions: dict[str, float]  # weight × raw, seconds of TTFT
    total: float


@dataclass(frozen=True)
class Decision:
    request: PlacementRequest
    outcome: Outcome
    chosen: ScoredCandidate | None = None
    runner_up: ScoredCandidate | None = None
    decided_by: str | None = None  # the term with the largest share of the margin over the runner-up
    reason: str | None = None  # why not, for "wait" and "never"
    wait_reason: WaitReason | None = None
    considered: int = 0
    rejections: dict[str, int] = field(default_factory=dict)  # filter → candidates it ruled out

    @property
    def placed(self) -> bool:
        return self.outcome == "placed"
