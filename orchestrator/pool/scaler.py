"""The scaler: given the fleet and each model's scaling policy, what to load or unload now.

A pure planner, like `place()`: it reads the fleet, the policies, when each replica went idle
and how many acquires wait, and returns a plan; it starts and stops nothing. Whoever runs it
(a periodic loop in the pool service) carries the plan out — a `ScaleUp` becomes a placement
of a new replica, a `ScaleDown` an unload — and records each started load as a loading
replica in the fleet before the next tick, so a load in flight is never planned twice.

Per model:
- replicas counted are those not draining: a draining replica is already on its way out
  and serves no new lease, so it neither satisfies a minimum nor absorbs demand;
- the model wants `desired` replicas, the largest of: `min_replicas`; what its demand needs
  under its scaler (below); and, while it is in use, its busy replicas plus `warm_buffer`;
- below `desired` it scales up (one `ScaleUp` per missing replica), never past
  `max_replicas` counting the replicas still loading;
- above `desired` it scales down idle replicas only: warm, no active lease, idle past their keep-alive;
  never one still loading (its load is paid for and about to serve), never below `min_replicas`.

The keep-alive is the operator's `idle_timeout_s` when the policy sets one. Otherwise, with `Foresight`
(the live pool and the simulator's `berth` policies pass one), it is learned per model and level from
the model's idle gaps (keepalive.py), announced steps hold or start replicas within the model's allowance
(intents.py), and the idle replicas of a model are ranked by what their cold start would cost against
the GPUs they hold, so the cheapest to bring back goes first whatever its age: a replica holding an
announced step's prefix is kept longest, then the one whose reload costs the most per GPU it holds.
Without `Foresight` (and no operator window) an idle replica is kept `FIXED_KEEP_ALIVE_S` and the
longest idle goes first: Berth's policy before it learned, kept as the simulator's `berth-fixed`.
Ties go by id, so a tick is reproducible.

A model with no policy scales by `ScalingPolicy()`'s defaults (to zero when idle). A model the
catalogue does not describe (no `ModelSpec` in `fleet.models`) is never scaled up: there is
nothing to size a replica by. `low_priority` acquires never trigger a scale-up, so the caller
leaves them out of `ModelDemand.waiting`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from sdk.wire.catalogue import ScalingPolicy

from ..weights_transfer import DISK_BYTES_PER_S, GIB
from .fleet import FleetState, ModelSpec, Replica
from .intents import Intent, IntentBook
from .keepalive import IdleGaps, KeepAlive
from .scorers import load_seconds
from .traffic import TrafficBook
from .weights import DEFAULT_CONFIG, PlacementConfig

DEFAULT_POLICY = ScalingPolicy()
FIXED_KEEP_ALIVE_S = 300.0
# A second a step waits for a load is charged as 60 GPU-seconds (about 4 cents at $2.5 per GPU-hour), and an
# idle replica holds the share of its GPUs' memory it takes (`_held_gpus`). A 2-GPU 70B that reloads from
# disk in 44 s then breaks even after 44 × (1.9 + 60) / 1.9 ≈ 24 minutes idle, an 8B alone on an H100 after
# 23 × 61 ≈ 23 minutes, one packed beside other models (0.29 of the GPU) after about 80. Under
# `berth simulate`'s four standard scenarios, 10 left 0.94% of the many-models scenario's calls meeting a
# cold start; 60 brought it to 0.31% at 0.47× k8s-spread's GPU-hours, and in steady and bursty left no
# cold start but each model's first (benchmarks/simulate_scenarios.py); 150 held 9% more GPU-hours there.
COLD_START_WAIT_GPUS = 60.0
# Intents due within a load and two ticks start replicas now; later ones only keep what is there.
INTENT_LEAD_TICKS = 2
# The attainment rule judges a model only on this many recent grants at least: one late call in three is noise.
MIN_ATTAINMENT_SAMPLES = 20


@dataclass
class Foresight:
    """What the scaler learns between ticks: idle gaps per model and level, announced steps and pre-warms.

    `intents=None` is the histogram policy alone (the simulator's `berth-histogram`)."""

    gaps: IdleGaps = field(default_factory=IdleGaps)
    intents: IntentBook | None = field(default_factory=IntentBook)
    config: PlacementConfig = DEFAULT_CONFIG
    tick_s: float = 2.0
    last_tick: float | None = None
    keep_alive: dict[str, list[KeepAlive]] = field(default_factory=dict)  # model → per level, as last planned
    traffic: TrafficBook = field(default_factory=TrafficBook)  # recent prompts, holds and predicted attainment


@dataclass(frozen=True)
class ModelDemand:
    """What is waiting for a model: acquires that found no slot and may scale it up."""

    waiting: int = 0  # low_priority acquires are not counted by the caller


@dataclass(frozen=True)
class ScaleUp:
    """Start one more replica of `model` (placement picks where)."""

    model: str
    reason: str
    prewarm: bool = False  # started for steps that have not asked yet (announced, or the learned head)


@dataclass(frozen=True)
class ScaleDown:
    """Unload one idle replica; its weights stay in the node's disk cache."""

    replica_id: str
    node_id: str
    model: str
    reason: str


def plan_scaling(
    fleet: FleetState,
    policies: Mapping[str, ScalingPolicy],
    idle_since: Mapping[str, float],
    now: float,
    demand: Mapping[str, ModelDemand],
    foresight: Foresight | None = None,
) -> list[ScaleUp | ScaleDown]:
    """What to load or unload now, model by model in name order.

    `idle_since` maps a replica id to when it last dropped to no active lease (seconds, same
    clock as `now`); a replica missing from it counts as idle since `now`, so a replica the
    caller has not timed yet is never unloaded.
    """
    models = set(policies) | set(demand) | {m for m, ids in fleet.replicas_by_model.items() if ids}
    announced = foresight.intents.due(now) if foresight is not None and foresight.intents is not None else {}
    models |= set(announced) | (foresight.gaps.models() if foresight is not None else set())
    plan: list[ScaleUp | ScaleDown] = []
    for model in sorted(models):
        policy = policies.get(model, DEFAULT_POLICY)
        replicas = sorted(
            (r for rid in fleet.replicas_by_model.get(model, {}) if (r := fleet.replicas[rid]).state != "draining"),
            key=lambda r: r.id,
        )
        waiting = demand.get(model, ModelDemand()).waiting
        # The waiting steps are those a replica placed for no tenant serves (the caller counts no other): an
        # isolated or dedicated tenant's replica takes none of them, so it neither absorbs them nor frees a slot.
        open_to_all = [r for r in replicas if r.boundary is None]
        spec = fleet.models.get(model)
        absorbed = (
            foresight is not None
            and spec is not None
            and _waiters_absorbed(fleet, foresight, spec, open_to_all, waiting, now)
        )
        desired, why = _desired(policy, replicas, waiting, spec, absorbed, open_to_all)
        holding = True  # the model's objectives hold: its idle replicas may go
        if foresight is not None and spec is not None and policy.scaler == "queue_delay":
            wanted, said, holding = _for_attainment(foresight, fleet, spec, replicas, now)
            if wanted > desired:
                desired, why = wanted, said
        prewarm = False
        keep_for_intents = 0
        if foresight is not None and spec is not None:
            leases = sum(r.active_leases for r in replicas)
            foresight.gaps.observe(model, math.ceil((leases + waiting) / max(spec.concurrency, 1)), now)
            wanted, keep_for_intents, said = _announced(
                foresight, fleet, policy, spec, replicas, leases + waiting, announced.get(model, []), now
            )
            if wanted > desired:
                desired, why, prewarm = wanted, said, True
        count = len(replicas)
        if desired > count:
            if spec is None:
                continue  # no catalogue entry: nothing to size a replica by
            missing = min(desired, policy.max_replicas) - count
            plan.extend(ScaleUp(model, why, prewarm) for _ in range(missing))
            continue
        keep = min(max(desired, keep_for_intents), policy.max_replicas)
        if not holding:
            continue  # remove capacity only while the model's objectives hold
        if foresight is None or spec is None:
            plan.extend(_scale_down_fixed(model, policy, replicas, keep, idle_since, now))
        else:
            plan.extend(
                _scale_down_learned(
                    foresight, fleet, model, policy, replicas, keep, announced.get(model, []), idle_since, now
                )
            )
            if (
                not replicas
                and policy.idle_timeout_s is None
                and (head := _head_prewarm(foresight, fleet, model, now)) is not None
            ):
                plan.append(head)
    if foresight is not None:
        foresight.last_tick = now
    return plan


def _announced(
    foresight: Foresight,
    fleet: FleetState,
    policy: ScalingPolicy,
    spec: ModelSpec,
    replicas: list[Replica],
    demand: int,
    intents: list[Intent],
    now: float,
) -> tuple[int, int, str]:
    """(replicas to have now for the announced steps due soon, replicas all announced steps keep, why),
    within the model's allowance; the allowance is charged with the GPUs its unused pre-warms sat idle
    since the last tick.

    An announced step due within a load starts a replica only when none could take it: the model has no
    replica, or every one is full (the queue-delay rule, a step early). Counting every announced step as
    a slot it will hold started replicas that were never used: the steps of a burst come back from their
    tools one by one, into slots the others free. Every announced step keeps capacity for itself, so no
    replica it would find warm is unloaded while its tools run."""
    book = foresight.intents
    if book is None:
        return 0, 0, ""
    if foresight.last_tick is not None:  # an unused pre-warm costs its allowance after its steps expired too
        unused = set(book.unused(spec.name))
        idle_gpus = sum(len(r.devices) for r in replicas if r.active_leases == 0 and r.id in unused)
        book.spend(spec.name, idle_gpus * (now - foresight.last_tick), now)
    if not intents or not book.within_allowance(spec.name, policy.intent_gpu_hours_per_hour, now):
        return 0, 0, ""
    keep = math.ceil((demand + len(intents)) / max(spec.concurrency, 1))
    lead = _typical_load_s(fleet, spec, foresight.config) + INTENT_LEAD_TICKS * foresight.tick_s
    soon = [i for i in intents if i.due <= now + lead]
    if not soon or any(r.has_slot for r in replicas):
        return 0, keep, ""
    kinds = ", ".join(sorted({i.kind for i in soon}))
    full = f"every one of its {len(replicas)} replica(s) full" if replicas else "no replica"
    return len(replicas) + 1, keep, f"intent: {len(soon)} announced step(s) ({kinds}) due within {lead:.0f}s, {full}"


def _waiters_absorbed(
    fleet: FleetState, foresight: Foresight, spec: ModelSpec, replicas: list[Replica], waiting: int, now: float
) -> bool:
    """Whether the model's replicas (a loading one included) will give every waiting step a slot before a new
    replica could load: then a new one would only start serving after they are done.

    Slots turn over once per recent call's hold (Little's law): `waiting` steps over the replicas' slots take
    waiting × hold ÷ slots. A replica still loading serves them once loaded, no later than a new one would.
    Counting load time is what keeps a burst at a model's first load from starting a second load beside it."""
    if waiting <= 0 or not replicas:
        return False
    load_s = _new_load_s(fleet, spec, foresight.config)
    if any(r.state == "loading" and r.load_s <= load_s for r in replicas):
        return True
    hold_s = foresight.traffic.mean_hold_s(spec.name, now)
    slots = sum(r.concurrency for r in replicas if r.state == "warm")
    if hold_s is None or slots == 0:
        return False
    return waiting * hold_s / slots <= load_s


def _for_attainment(
    foresight: Foresight, fleet: FleetState, spec: ModelSpec, replicas: list[Replica], now: float
) -> tuple[int, str, bool]:
    """(replicas the model's latency objectives want, why, whether they hold).

    Below its target, with misses that capacity would turn into meets (steps predicted late for their wait, not
    for their own prefill), the model wants one more replica, unless one is loading already: its capacity
    comes before another load would. Above its target it holds, and only then may an idle replica go. Each change
    of its warm replicas starts the judgement afresh, so one replica is added per shortfall, not one a tick."""
    foresight.traffic.serving(spec.name, frozenset(r.id for r in replicas if r.state == "warm"), now)
    attained = foresight.traffic.attainment(spec.name, now)
    target = foresight.traffic.target(spec.name, now)
    if attained.calls < MIN_ATTAINMENT_SAMPLES or attained.share >= target:
        return 0, "", True
    if attained.fixable_misses == 0 or any(r.state == "loading" for r in replicas):
        return 0, "", False
    why = (
        f"attainment {attained.share:.1%} below its {target:.1%} target: {attained.fixable_misses} of "
        f"{attained.calls} recent steps predicted late for want of capacity"
    )
    return len(replicas) + 1, why, False


def _new_load_s(fleet: FleetState, spec: ModelSpec, config: PlacementConfig) -> float:
    """What a new replica of the model would take to load from the nearest copy of its weights the fleet has
    (a node's disk, a datacenter peer, else the origin), at the configured rates."""
    load_s = _typical_load_s(fleet, spec, config)
    if fleet.cached.get(spec.name):
        return load_s
    if fleet.weights_in_dc.get(spec.name):
        return load_s + spec.weights_gib / config.intra_dc_gib_per_s
    return load_s + spec.weights_gib / config.wan_gib_per_s


def _typical_load_s(fleet: FleetState, spec: ModelSpec, config: PlacementConfig) -> float:
    """A load from a node's disk at the standard NVMe rate: how far ahead an announced step must start its
    replica, and what a replica not placed yet would take to come back."""
    return spec.weights_gib / (DISK_BYTES_PER_S / GIB) + config.engine_start_s


def _desired(
    policy: ScalingPolicy,
    replicas: list[Replica],
    waiting: int,
    spec: ModelSpec | None,
    absorbed: bool = False,
    open_to_all: list[Replica] | None = None,
) -> tuple[int, str]:
    """How many replicas the model should have now, and the rule that asks for the most; `absorbed`: the
    replicas it has will take the waiting steps before a new one could load (`_waiters_absorbed`);
    `open_to_all`: those of them any waiting step may use (all of them when not given)."""
    count = len(replicas)
    usable = replicas if open_to_all is None else open_to_all
    concurrency = max(spec.concurrency if spec else 1, 1)
    # Enough new replicas to give every waiting acquire a slot (each serves `concurrency` leases at once).
    for_waiters = count + math.ceil(waiting / concurrency)
    needs: list[tuple[int, str]] = [(policy.min_replicas, f"below min_replicas ({count} < {policy.min_replicas})")]

    if policy.scaler == "queue_delay":
        if absorbed:
            pass  # a load in flight, or slots turning over, serves them before a new replica could
        elif waiting > 0:
            needs.append((for_waiters, f"{waiting} acquire(s) waiting"))
        # Every replica is full and over the target delay (a loading one included: its queue starts
        # when it is warm): no replica can take a lease within target, so one more is worth loading.
        # A replica with a free slot takes the next lease at once, into its running batch, however
        # many tokens it has still to write: counting those as delay loaded replicas for agent steps'
        # long prompts while slots stood free (measured by `berth simulate`).
        elif usable and all(r.queue_s > policy.target and not r.has_slot for r in usable):
            shortest = min(r.queue_s for r in usable)
            needs.append((count + 1, f"queue {shortest:.1f}s over the {policy.target:g}s target on every replica"))
    else:  # request_count
        leases = sum(r.active_leases for r in replicas)
        if replicas and leases / count > policy.target:
            # The replica count that brings leases per replica back to the target (as Kubernetes' HPA does).
            needs.append(
                (
                    math.ceil(leases / policy.target),
                    f"{leases / count:.1f} leases per replica over the target {policy.target:g}",
                )
            )
        if waiting > 0 and not any(r.has_slot for r in usable):
            needs.append((for_waiters, f"{waiting} acquire(s) waiting and every replica full"))
        # Otherwise it still counts as a floor for scale-down: never unload below what the leases need.
        elif replicas:
            needs.append((math.ceil(leases / policy.target), "leases per replica at the target"))

    # The warm buffer absorbs a burst while the model is in use: keep `warm_buffer` replicas with
    # no lease beyond those serving. An unused model (no lease, nothing waiting) keeps none, so a
    # buffer never holds GPUs for a model nobody calls; min_replicas is the knob for that.
    busy = sum(1 for r in replicas if r.active_leases > 0)
    if policy.warm_buffer and (busy or waiting):
        needs.append((busy + policy.warm_buffer, f"warm buffer of {policy.warm_buffer} idle replica(s)"))

    return max(needs, key=lambda need: need[0])


def _scale_down_fixed(
    model: str,
    policy: ScalingPolicy,
    replicas: list[Replica],
    keep: int,
    idle_since: Mapping[str, float],
    now: float,
) -> list[ScaleDown]:
    """Unload at most the excess over `keep`: idle warm replicas past the fixed window, longest idle first."""
    excess = len(replicas) - max(keep, policy.min_replicas)
    if excess <= 0:
        return []
    window = policy.idle_timeout_s if policy.idle_timeout_s is not None else FIXED_KEEP_ALIVE_S
    idle = [
        (idle_since.get(r.id, now), r)
        for r in replicas
        if r.state == "warm" and r.active_leases == 0 and now - idle_since.get(r.id, now) >= window
    ]
    idle.sort(key=lambda pair: (pair[0], pair[1].id))
    return [
        ScaleDown(r.id, r.node_id, model, f"idle {now - since:.0f}s (timeout {window:g}s)")
        for since, r in idle[:excess]
    ]


def _scale_down_learned(
    foresight: Foresight,
    fleet: FleetState,
    model: str,
    policy: ScalingPolicy,
    replicas: list[Replica],
    keep: int,
    intents: list[Intent],
    idle_since: Mapping[str, float],
    now: float,
) -> list[ScaleDown]:
    """Unload the idle replicas above `keep` whose level's keep-alive has run out.

    Busy replicas fill the lowest levels; the idle ones take the next levels in the order of what keeping
    them is worth (`_keep_value`), so the one cheapest to bring back sits highest and goes first. Each is
    judged by its level's keep-alive, timed from when it went idle or its level did, whichever is later."""
    busy = sum(1 for r in replicas if r.active_leases > 0 or r.state != "warm")
    prefixes = {i.replica_id for i in intents if i.replica_id is not None}
    idle = sorted(
        (r for r in replicas if r.state == "warm" and r.active_leases == 0),
        key=lambda r: _keep_value(fleet, r, prefixes, foresight.config),
        reverse=True,
    )
    floor = max(keep, policy.min_replicas)
    levels: list[KeepAlive] = []
    plan: list[ScaleDown] = []
    for offset, replica in enumerate(idle):
        level = busy + offset + 1
        load_s = _reload_s(fleet, replica, foresight.config)
        alive = (
            KeepAlive(policy.idle_timeout_s, 0.0, "operator", 0)
            if policy.idle_timeout_s is not None
            else foresight.gaps.keep_alive(model, level, now, _held_gpus(fleet, replica), load_s, COLD_START_WAIT_GPUS)
        )
        levels.append(alive)
        if level <= floor:
            continue
        since = foresight.gaps.idle_since(model, level)
        mine = idle_since.get(replica.id, now)
        # The operator's window times the replica itself; a learned one also waits for its level's gap, which
        # the ticks sample (a replica freed while demand still needs its level is not idle at that level).
        idle_s = now - (mine if alive.source == "operator" else max(mine, since if since is not None else mine))
        level_idle_s = now - since if since is not None else idle_s
        if alive.prewarm_s > 0 and level_idle_s < alive.prewarm_s - load_s:
            plan.append(
                ScaleDown(
                    replica.id,
                    replica.node_id,
                    model,
                    f"level {level}: next need at least {alive.prewarm_s:.0f}s after idle "
                    f"(learned head); pre-warmed again before it",
                )
            )
        elif (level_idle_s if alive.prewarm_s > 0 else idle_s) >= alive.window_s:
            # A pre-warm policy's window runs from the level's going idle, not from the pre-warm's own start.
            plan.append(
                ScaleDown(
                    replica.id,
                    replica.node_id,
                    model,
                    f"idle {idle_s:.0f}s at level {level} ({alive.source} keep-alive {alive.window_s:.0f}s)",
                )
            )
    if policy.idle_timeout_s is None or levels:
        foresight.keep_alive[model] = levels or [_level_keep_alive(foresight, fleet, model, busy + 1, now)]
    return plan


def _head_prewarm(foresight: Foresight, fleet: FleetState, model: str, now: float) -> ScaleUp | None:
    """Load the model's first replica again ahead of its learned head: demand left it idle since t0 and
    the histogram says no gap is shorter than the head, so the load starts at t0 + head − its load time."""
    since = foresight.gaps.idle_since(model, 1)
    if since is None:
        return None
    alive = foresight.keep_alive[model][0]  # planned this tick by _scale_down_learned, with no replica: level 1
    load_s = _typical_load_s(fleet, fleet.models[model], foresight.config)
    if alive.prewarm_s > 0 and since + alive.prewarm_s - load_s <= now < since + alive.window_s:
        return ScaleUp(
            model,
            f"pre-warm: idle {now - since:.0f}s, and no idle gap of the last hours was "
            f"shorter than {alive.prewarm_s:.0f}s",
            prewarm=True,
        )
    return None


def _level_keep_alive(foresight: Foresight, fleet: FleetState, model: str, level: int, now: float) -> KeepAlive:
    """A level's keep-alive for a replica not placed yet: one of the model's smallest gangs, loaded from disk."""
    spec = fleet.models[model]
    return foresight.gaps.keep_alive(
        model,
        level,
        now,
        min(spec.tensor_parallel),
        _typical_load_s(fleet, spec, foresight.config),
        COLD_START_WAIT_GPUS,
    )


def _reload_s(fleet: FleetState, replica: Replica, config: PlacementConfig) -> float:
    """How long the replica takes to load again on its node: its weights stay in the node's disk cache."""
    return load_seconds(fleet, replica.model, fleet.nodes[replica.node_id], "disk", config)


def _keep_value(fleet: FleetState, replica: Replica, prefixes: set[str], config: PlacementConfig) -> tuple:
    """What keeping an idle replica is worth, for ordering: a replica holding an announced step's prefix
    first (its loss costs that step a cold start and its whole prompt again), then the break-even of its
    ski rental, its cold start's cost over the GPUs it holds (the longer, the more it is worth keeping),
    then its id."""
    gpus = _held_gpus(fleet, replica)
    break_even = _reload_s(fleet, replica, config) * (gpus + COLD_START_WAIT_GPUS) / gpus
    return (replica.id in prefixes, break_even, replica.id)


def _held_gpus(fleet: FleetState, replica: Replica) -> float:
    """The GPUs an idle replica holds, as the share of each device's memory it takes: what unloading it
    gives back. A 23 GiB 8B packed beside others on an 80 GiB GPU holds 0.29 of it, not a whole GPU."""
    node = fleet.nodes[replica.node_id]
    return sum(min(replica.per_device_gib / max(node.device(i).memory_gib, 1e-9), 1.0) for i in replica.devices)
