"""The placement and scaling policies a simulation compares, each a name and three decisions.

- `berth`: the live pool's own functions (orchestrator/pool/admission.py over `place()`) and its
  scaler (`plan_scaling`) under each model's default ScalingPolicy, with the live pool's `Foresight`:
  locality-aware placement that may start a replica for a step, a queue-delay scaler, keep-alive learned
  per model from its idle gaps, replicas started or kept for announced steps, idle replicas shed by the
  cost of bringing them back.
- `berth-histogram`: the same without announced steps (the learned keep-alive alone, as Shahrad et al.'s
  hybrid histogram policy would run it).
- `berth-fixed`: the same without learning: every idle replica kept 300 s, the longest idle unloaded
  first (Berth's policy before it learned).
- `k8s-spread`, `bin-pack`, `random`: what a Kubernetes Deployment with an HPA does. A request goes
  only to a ready (warm) replica with a free slot, least busy first (a Service); replicas are added by
  the scaler alone, one per `HPA_TARGET_SHARE` of a replica's slots in use (the HPA's request-count
  target), at least one per model (an HPA's minReplicas), down after the 5-minute stabilization
  window; a new replica takes whole GPUs (the device plugin's unit) on the least allocated node
  (spread), the most allocated (bin-pack) or any (random). Its pod downloads the weights from the
  origin, as a stock vLLM Deployment does (an emptyDir volume); `baseline_node_cache=True` gives the
  baselines Berth's node disk caches and datacenter peers instead, to see what placement alone is worth.
- `always-warm`: every model held at its peak replica count (the berth run's) from before the first
  request: the latency floor and the cost ceiling; a replica lost to a preemption is started again.

Every policy shares the simulated world: the same load physics (`scorers.load_seconds`), the same wait
queue and admission rule (`admission.may_go`), the same preemptions and recovery.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from sdk.wire.catalogue import ScalingPolicy

from ..pool import admission
from ..pool.decision import Candidate, Decision, PlacementRequest, ScoredCandidate, Tier
from ..pool.fleet import EPSILON_GIB, FleetState, ModelSpec, Node
from ..pool.scaler import DEFAULT_POLICY, Foresight, ModelDemand, ScaleDown, ScaleUp, plan_scaling
from ..pool.scorers import load_seconds
from ..pool.weights import PlacementConfig

Plan = list[ScaleUp | ScaleDown]
# The HPA's target: scale out when more than this share of a replica's slots are in use on average.
HPA_TARGET_SHARE = 0.5
HPA_STABILIZATION_S = 300.0
BERTH_POLICIES = ("berth", "berth-histogram", "berth-fixed")
POLICY_NAMES = (*BERTH_POLICIES, "k8s-spread", "bin-pack", "random", "always-warm")


@dataclass
class Policy:
    name: str
    # Where a step goes now (placed on a replica or a new one), or why it waits.
    place: Callable[[FleetState, PlacementRequest], Decision]
    # Where the scaler's next replica of a model goes; the int is the long prompt of the model's interactive
    # traffic it must serve within objectives (None: none recently, so placed as batch).
    new_replica: Callable[[FleetState, str, int | None], Decision]
    scaling: Callable[[str, ModelSpec], ScalingPolicy]
    # Replicas per model loaded before the run starts (always-warm), not counted as cold starts.
    preload: Mapping[str, int] = field(default_factory=dict)
    # What the scaler learns during the run (the berth policies); None plans from the fleet alone.
    foresight: Foresight | None = None

    def plan(
        self, fleet: FleetState, idle_since: Mapping[str, float], now: float, demand: Mapping[str, ModelDemand]
    ) -> Plan:
        policies = {name: self.scaling(name, spec) for name, spec in fleet.models.items()}
        return plan_scaling(fleet, policies, idle_since, now, demand, self.foresight)


def berth_policy(config: PlacementConfig, name: str = "berth", tick_s: float = 2.0) -> Policy:
    """`berth`, `berth-histogram` or `berth-fixed`: one placement, three scalers (the module's docstring)."""
    foresights = {
        "berth": lambda: Foresight(config=config, tick_s=tick_s),
        "berth-histogram": lambda: Foresight(intents=None, config=config, tick_s=tick_s),
        "berth-fixed": lambda: None,
    }
    return Policy(
        name,
        place=lambda fleet, request: admission.place_away_from_reclaimed_spot(fleet, request, config),
        new_replica=lambda fleet, model, prompt: admission.place_scaler_replica(fleet, model, config, prompt),
        scaling=lambda _name, _spec: DEFAULT_POLICY,
        foresight=foresights[name](),
    )


def kubernetes_policy(name: str, config: PlacementConfig, seed: int = 0, node_cache: bool = False) -> Policy:
    """`k8s-spread`, `bin-pack` or `random`: the same Service routing and HPA, another node choice."""
    rng = random.Random(seed)
    Option = tuple[float, Node, tuple[int, ...]]
    orders: dict[str, Callable[[list[Option]], Option]] = {
        "k8s-spread": lambda options: min(options, key=lambda o: (-o[0], o[1].id)),  # the least allocated node
        "bin-pack": lambda options: min(options, key=lambda o: (o[0], o[1].id)),  # the most allocated node
        "random": lambda options: rng.choice(sorted(options, key=lambda o: (o[1].id, o[2]))),
    }
    if name not in orders:
        raise ValueError(f"policy: unknown Kubernetes-style policy {name!r}")
    choose = orders[name]

    def new_replica(fleet: FleetState, model: str, _prompt: int | None = None) -> Decision:
        request = PlacementRequest(model=model, tokens=1, priority="batch", new_replica_only=True)
        options = whole_gpu_options(fleet, fleet.models[model])
        if not options:
            return Decision(request, "wait", reason="no node has free whole GPUs for it", wait_reason="no_capacity")
        _free, node, devices = choose(options)
        return new_replica_decision(fleet, request, node, devices, config, node_cache)

    return Policy(name, place=route_to_ready_replica, new_replica=new_replica, scaling=hpa_scaling)


def always_warm_policy(peaks: Mapping[str, int], config: PlacementConfig, node_cache: bool = False) -> Policy:
    """Each model held at `peaks[model]` replicas, placed like k8s-spread, never scaled down."""
    spread = kubernetes_policy("k8s-spread", config, node_cache=node_cache)

    def scaling(name: str, _spec: ModelSpec) -> ScalingPolicy:
        peak = max(peaks.get(name, 0), 1)
        return ScalingPolicy(min_replicas=peak, max_replicas=peak, idle_timeout_s=7 * 24 * 3600)

    return Policy(
        "always-warm",
        place=route_to_ready_replica,
        new_replica=spread.new_replica,
        scaling=scaling,
        preload=dict(peaks),
    )


def hpa_scaling(_name: str, spec: ModelSpec) -> ScalingPolicy:
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


def whole_gpu_options(fleet: FleetState, model: ModelSpec) -> list[tuple[float, Node, tuple[int, ...]]]:
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


def policy_named(
    name: str,
    config: PlacementConfig,
    seed: int,
    peaks: Mapping[str, int] | None = None,
    baseline_node_cache: bool = False,
) -> Policy:
    if name in BERTH_POLICIES:
        return berth_policy(config, name)
    if name == "always-warm":
        if peaks is None:
            raise ValueError("policy: always-warm needs the peak replica counts of a berth run")
        return always_warm_policy(peaks, config, baseline_node_cache)
    if name in POLICY_NAMES:
        return kubernetes_policy(name, config, seed, baseline_node_cache)
    raise ValueError(f"policy: unknown policy {name!r}; known: {', '.join(POLICY_NAMES)}")
