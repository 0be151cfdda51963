"""The scaler: given the fleet and each model's scaling policy, what to load or unload now.

A pure planner, like `place()`: it reads the fleet, the policies, when each replica went idle
and how many acquires wait, and returns a plan; it starts and stops nothing. Whoever runs it
(a periodic loop in the pool service) carries the plan out — a `ScaleUp` becomes a placement
of a new replica, a `ScaleDown` an unload — and records each started load as a loading
replica in the fleet before the next tick, so a load in flight is never planned twice.

Per model, in DESIGN.md's terms:
- replicas counted are those not draining: a draining replica is already on its way out
  and serves no new lease, so it neither satisfies a minimum nor absorbs demand;
- the model wants `desired` replicas, the largest of: `min_replicas`; what its demand needs
  under its scaler (below); and, while it is in use, its busy replicas plus `warm_buffer`;
- below `desired` it scales up (one `ScaleUp` per missing replica), never past
  `max_replicas` counting the replicas still loading;
- above `desired` it scales down idle replicas only: warm, no active lease, idle for at least
  `idle_timeout_s`; never one still loading (its load is paid for and about to serve), never
  below `min_replicas`; the longest idle go first, ties by id, so a tick is reproducible.

A model with no policy scales by `ScalingPolicy()`'s defaults (to zero when idle). A model the
catalogue does not describe (no `ModelSpec` in `fleet.models`) is never scaled up: there is
nothing to size a replica by. `low_priority` acquires never trigger a scale-up, so the caller
leaves them out of `ModelDemand.waiting`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from sdk._catalogue import ScalingPolicy

from .fleet import FleetState, ModelSpec, Replica

DEFAULT_POLICY = ScalingPolicy()


@dataclass(frozen=True)
class ModelDemand:
    """What is waiting for a model: acquires that found no slot and may scale it up."""

    waiting: int = 0  # low_priority acquires are not counted by the caller


@dataclass(frozen=True)
class ScaleUp:
    """Start one more replica of `model` (placement picks where)."""

    model: str
    reason: str


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
) -> list[ScaleUp | ScaleDown]:
    """What to load or unload now, model by model in name order.

    `idle_since` maps a replica id to when it last dropped to no active lease (seconds, same
    clock as `now`); a replica missing from it counts as idle since `now`, so a replica the
    caller has not timed yet is never unloaded.
    """
    models = set(policies) | set(demand) | {m for m, ids in fleet.replicas_by_model.items() if ids}
    plan: list[ScaleUp | ScaleDown] = []
    for model in sorted(models):
        policy = policies.get(model, DEFAULT_POLICY)
        replicas = sorted(
            (r for rid in fleet.replicas_by_model.get(model, {}) if (r := fleet.replicas[rid]).state != "draining"),
            key=lambda r: r.id,
        )
        desired, why = _desired(policy, replicas, demand.get(model, ModelDemand()).waiting, fleet.models.get(model))
        count = len(replicas)
        if desired > count:
            if model not in fleet.models:
                continue  # no catalogue entry: nothing to size a replica by
            missing = min(desired, policy.max_replicas) - count
            plan.extend(ScaleUp(model, why) for _ in range(missing))
        else:
            plan.extend(_scale_down(model, policy, replicas, min(desired, policy.max_replicas), idle_since, now))
    return plan


def _desired(policy: ScalingPolicy, replicas: list[Replica], waiting: int, spec: ModelSpec | None) -> tuple[int, str]:
    """How many replicas the model should have now, and the rule that asks for the most."""
    count = len(replicas)
    concurrency = max(spec.concurrency if spec else 1, 1)
    # Enough new replicas to give every waiting acquire a slot (each serves `concurrency` leases at once).
    for_waiters = count + math.ceil(waiting / concurrency)
    needs: list[tuple[int, str]] = [(policy.min_replicas, f"below min_replicas ({count} < {policy.min_replicas})")]

    if policy.scaler == "queue_delay":
        if waiting > 0:
            needs.append((for_waiters, f"{waiting} acquire(s) waiting"))
        # Every replica is full and over the target delay (a loading one included: its queue starts
        # when it is warm): no replica can take a lease within target, so one more is worth loading.
        # A replica with a free slot takes the next lease at once, into its running batch, however
        # many tokens it has still to write: counting those as delay loaded replicas for agent steps'
        # long prompts while slots stood free (measured by `berth simulate`).
        elif replicas and all(r.queue_s > policy.target and not r.has_slot for r in replicas):
            shortest = min(r.queue_s for r in replicas)
            needs.append((count + 1, f"queue {shortest:.1f}s over the {policy.target:g}s target on every replica"))
    else:  # request_count
        leases = sum(r.active_leases for r in replicas)
        if replicas and leases / count > policy.target:
            # The replica count that brings leases per replica back to the target (as Kubernetes' HPA does).
            needs.append((math.ceil(leases / policy.target),
                          f"{leases / count:.1f} leases per replica over the target {policy.target:g}"))
        if waiting > 0 and not any(r.has_slot for r in replicas):
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


def _scale_down(
    model: str,
    policy: ScalingPolicy,
    replicas: list[Replica],
    keep: int,
    idle_since: Mapping[str, float],
    now: float,
) -> list[ScaleDown]:
    """Unload at most the excess over `keep`: idle warm replicas past the timeout, longest idle first."""
    excess = len(replicas) - max(keep, policy.min_replicas)
    if excess <= 0:
        return []
    idle = [
        (idle_since.get(r.id, now), r)
        for r in replicas
        if r.state == "warm" and r.active_leases == 0 and now - idle_since.get(r.id, now) >= policy.idle_timeout_s
    ]
    idle.sort(key=lambda pair: (pair[0], pair[1].id))
    return [
        ScaleDown(r.id, r.node_id, model, f"idle {now - since:.0f}s (timeout {policy.idle_timeout_s:g}s)")
        for since, r in idle[:excess]
    ]
