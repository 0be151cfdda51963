"""The live pool's placement policy, chosen by name: Berth's own, or the Kubernetes-style baseline.

`berth` (the default) is the pool service's own code: `place()` for a step, which may start a replica for
it, and a scaler that plans with each model's scaling policy and what it learned (`Foresight`).
`k8s-spread` swaps in the baseline the simulator compares Berth with (orchestrator/pool/baselines.py): a
step only takes a slot of a ready replica, the scaler alone adds replicas, by an HPA's request count, on
whole GPUs of the least allocated node, and learns nothing. It exists so that one stack can be measured
under both on the same machine (benchmarks/live_trace.py), not to be run in production.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import get_args

from sdk.wire.catalogue import ScalingPolicy

from ..config import PlacementPolicyName
from .baselines import NewReplica, hpa_scaling, route_to_ready_replica, scheduler_new_replica
from .decision import Decision, PlacementRequest
from .fleet import FleetState
from .scaler import ModelDemand
from .weights import PlacementConfig

PLACEMENT_POLICIES: tuple[str, ...] = get_args(PlacementPolicyName)


@dataclass(frozen=True)
class Baseline:
    """The three decisions a baseline takes over from the pool: a step's lease, the scaler's new replica, and
    each model's scaling policy (from the fleet and the steps waiting per model)."""

    name: str
    place: Callable[[FleetState, PlacementRequest], Decision]
    new_replica: NewReplica
    scaling: Callable[[FleetState, Mapping[str, ModelDemand]], dict[str, ScalingPolicy]]


def baseline_named(name: str, config: PlacementConfig) -> Baseline | None:
    """The baseline `name`, None for `berth` (the pool's own code); a ValueError naming the setting otherwise."""
    if name == "berth":
        return None
    if name == "k8s-spread":
        return Baseline(
            name,
            place=route_to_ready_replica,
            new_replica=scheduler_new_replica(name, config),
            scaling=_hpa_per_model_in_use,
        )
    raise ValueError(f"placement_policy: unknown policy {name!r}; known: {', '.join(PLACEMENT_POLICIES)}")


def _hpa_per_model_in_use(fleet: FleetState, demand: Mapping[str, ModelDemand]) -> dict[str, ScalingPolicy]:
    """An HPA for each model that has a Deployment: one asked for (a step waits) or already running. The live
    catalogue lists models nobody calls, and an HPA's minReplicas for each would hold GPUs no simulated baseline
    holds (the simulator's fleet knows only the workload's models)."""
    in_use = set(demand) | {model for model, ids in fleet.replicas_by_model.items() if ids}
    return {model: hpa_scaling(model, spec) for model, spec in fleet.models.items() if model in in_use}
