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
  the scaler alone, one per `baselines.HPA_TARGET_SHARE` of a replica's slots in use (the HPA's request-count
  target), at least one per model (an HPA's minReplicas), down after the 5-minute stabilization
  window; a new replica takes whole GPUs (the device plugin's unit) on the least allocated node
  (spread), the most allocated (bin-pack) or any (random). Its pod downloads the weights from the
  origin, as a stock vLLM Deployment does (an emptyDir volume); `baseline_node_cache=True` gives the
  baselines Berth's node disk caches and datacenter peers instead, to see what placement alone is worth.
  These are orchestrator/pool/baselines.py's functions, which the live pool also runs under
  `placement_policy = "k8s-spread"`.
- `always-warm`: every model held at its peak replica count (the berth run's) from before the first
  request: the latency floor and the cost ceiling; a replica lost to a preemption is started again.

Every policy shares the simulated world: the same load physics (`scorers.load_seconds`), the same wait
queue and admission rule (`admission.may_go`), the same preemptions and recovery.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from sdk.wire.catalogue import ScalingPolicy

from ..pool import admission
from ..pool.baselines import hpa_scaling, route_to_ready_replica, scheduler_new_replica
from ..pool.decision import Decision, PlacementRequest
from ..pool.fleet import FleetState, ModelSpec
from ..pool.scaler import DEFAULT_POLICY, Foresight, ModelDemand, ScaleDown, ScaleUp, plan_scaling
from ..pool.weights import PlacementConfig

Plan = list[ScaleUp | ScaleDown]
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
    """`k8s-spread`, `bin-pack` or `random`: the same Service routing and HPA, another node choice
    (orchestrator/pool/baselines.py, which the live pool runs too)."""
    new_replica = scheduler_new_replica(name, config, seed, node_cache)
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
