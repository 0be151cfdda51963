"""What a Kubernetes Deployment with an HPA does with model calls: the baseline Berth is measured against.

A Service sends a request only to a ready (warm) replica with a free slot, least busy first; it never
starts one. Replicas are added by the HPA alone, one per `HPA_TARGET_SHARE` of a replica's slots in use
(its request-count target), at least one per model (minReplicas), and taken away after the 5-minute
stabilization window. A new replica takes whole GPUs, the device plugin's unit, on a node the scheduler
chooses: the least allocated (spread), the most allocated (bin-pack) or any (random). Its pod downloads
the weights from the origin, as a stock vLLM Deployment does with an emptyDir volume.

These are pure functions over the in-memory fleet, kept in the pool so that `berth simulate`
(orchestrator/simulator/policies.py) and the live pool with `placement_policy = "k8s-spread"`
(orchestrator/pool/placement_policy.py) run the very same baseline.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from sdk.wire.catalogue import ScalingPolicy

from .decision import Candidate, Decision, PlacementRequest, ScoredCandidate, Tier
from .fleet import EPSILON_GIB, FleetState, ModelSpec, Node
from .scaler import DEFAULT_POLICY
from .scorers import load_seconds
from .weights import PlacementConfig

# The HPA's target: scale out when more than this share of a replica's slots are in use on average.
HPA_TARGET_SHARE = 0.5
HPA_STABILIZATION_S = 300.0

# (free share of the node's GPUs after placing, node, devices): one way to give a new replica whole GPUs.
GpuOption = tuple[float, Node, tuple[int, ...]]
NewReplica = Callable[[FleetState, str, int | None], Decision]


def hpa_scaling(_name: str, spec: ModelSpec) -> ScalingPolicy:
    """An HPA on request count: one replica per half of a replica's slots in use, at least one, down after 5 min."""
    return ScalingPolicy(
        min_replicas=1,
        max_replicas=DEFAULT_POLICY.max_replicas,
        scaler="request_count",
        target=max(spec.concurrency * HPA_TARGET_SHARE, 1.0),
        idle_timeout_s=HPA_STABILIZATION_S,
    )


def route_to_ready_replica(fleet: FleetState, request: PlacementRequest) -> Decision:
    """A Service: the least busy ready replica with a free slot, on a node that may still take work."""
    ready = [
        r
        for rid in fleet.replicas_by_model.get(request.model, {})
        if (r := fleet.replicas[rid]).state == "warm"
        and r.has_slot
        and fleet.nodes[r.node_id].schedulable
        and r.node_id not in request.exclude_nodes
    ]
    if not ready:
        if request.model not in fleet.models:
            return Decision(request, "never", reason=f"unknown model {request.model!r}")
        return Decision(request, "wait", reason="no ready replica has a free slot", wait_reason="busy")
    replica = min(ready, key=lambda r: (r.active_leases, r.id))
    chosen = ScoredCandidate(Candidate("warm", replica.node_id, replica.devices, replica.id), {"ttft": 0.0}, {}, 0.0)
    return Decision(request, "placed", chosen=chosen, decided_by="service")


def whole_gpu_options(fleet: FleetState, model: ModelSpec) -> list[GpuOption]:
    """(free share of the node's GPUs after placing, node, devices) for every node with enough whole free
    GPUs of the smallest tensor-parallel degree the model fits on there."""
    options = []
    for node in fleet.nodes.values():
        if not node.schedulable:
            continue
        free = [d for d in node.devices if d.replicas == 0 and d.mig_profile is None]
        for degree in sorted(model.tensor_parallel):
            fitting = [d for d in free if d.memory_gib + EPSILON_GIB >= model.memory_gib / degree]
            if len(fitting) >= degree:
                devices = tuple(d.index for d in fitting[:degree])
                options.append(((len(free) - degree) / len(node.devices), node, devices))
                break
    return options


def node_choice(name: str, seed: int = 0) -> Callable[[list[GpuOption]], GpuOption]:
    """The scheduler's choice among whole-GPU options under `name` (spread, bin-pack or random)."""
    rng = random.Random(seed)
    orders: dict[str, Callable[[list[GpuOption]], GpuOption]] = {
        "k8s-spread": lambda options: min(options, key=lambda o: (-o[0], o[1].id)),  # the least allocated node
        "bin-pack": lambda options: min(options, key=lambda o: (o[0], o[1].id)),  # the most allocated node
        "random": lambda options: rng.choice(sorted(options, key=lambda o: (o[1].id, o[2]))),
    }
    if name not in orders:
        raise ValueError(f"policy: unknown Kubernetes-style policy {name!r}")
    return orders[name]


def scheduler_new_replica(name: str, config: PlacementConfig, seed: int = 0, node_cache: bool = False) -> NewReplica:
    """Where the HPA's next replica of a model goes under the scheduler `name`; the prompt argument is ignored
    (the scheduler knows nothing of the model's traffic)."""
    choose = node_choice(name, seed)

    def new_replica(fleet: FleetState, model: str, _prompt: int | None = None) -> Decision:
        request = PlacementRequest(model=model, tokens=1, priority="batch", new_replica_only=True)
        options = whole_gpu_options(fleet, fleet.models[model])
        if not options:
            return Decision(request, "wait", reason="no node has free whole GPUs for it", wait_reason="no_capacity")
        _free, node, devices = choose(options)
        return new_replica_decision(fleet, request, node, devices, config, node_cache)

    return new_replica


def new_replica_decision(
    fleet: FleetState,
    request: PlacementRequest,
    node: Node,
    devices: tuple[int, ...],
    config: PlacementConfig,
    node_cache: bool,
) -> Decision:
    """A decision to start a replica on `devices` of `node`, its weights from where they are (`node_cache`)
    or from the origin."""
    tier: Tier = weights_tier(fleet, request.model, node) if node_cache else "origin"
    load_s = load_seconds(fleet, request.model, node, tier, config)
    chosen = ScoredCandidate(Candidate(tier, node.id, devices), {"ttft": load_s}, {}, load_s)
    return Decision(request, "placed", chosen=chosen, decided_by="scheduler")


def weights_tier(fleet: FleetState, model: str, node: Node) -> Tier:
    if node.id in fleet.cached.get(model, ()):
        return "disk"
    if fleet.caching_in(model, node.datacenter) > 0:
        return "datacenter"
    return "origin"
