"""The pool's rules around `place()`: which placed step may take its lease while others wait, the
retry that still serves a step away from reclaimed spot zones, and where the scaler starts a replica.

Pure functions over the in-memory fleet, like `place()` itself: the live pool service applies them
under its lock, and `berth simulate` applies the very same ones in virtual time, so a simulated
fleet is admitted, queued and scaled by Berth's rules rather than a copy of them.
"""

from __future__ import annotations

from dataclasses import replace

from .decision import Decision, PlacementRequest
from .filters import boundary_owner
from .fleet import FleetState
from .placement import place
from .weights import PlacementConfig


def place_away_from_reclaimed_spot(fleet: FleetState, request: PlacementRequest, config: PlacementConfig) -> Decision:
    """Avoid the spot nodes of zones reclaimed under this step while anything else can serve it; a
    zone's other spot nodes are only likely to go next, so they still serve rather than nobody."""
    decision = place(fleet, request, config)
    if decision.outcome != "placed" and request.exclude_spot_zones:
        decision = place(fleet, replace(request, exclude_spot_zones=frozenset()), config)
    return decision


def may_go(fleet: FleetState, decision: Decision, ahead: int) -> bool:
    """Whether a placed step may have its lease although `ahead` steps wait before it.

    A free slot of a replica is taken only while more slots are free than steps wait ahead (each
    of them still finds one when it next asks); a new replica is started by the first in line
    only. Waiters ask again after pauses of up to seconds: holding every free slot for the first
    of them left a replica's slots idle under a burst.
    """
    if ahead == 0:
        return True
    chosen = decision.chosen
    if chosen is None or chosen.candidate.replica_id is None:
        return False
    request = decision.request
    owner = boundary_owner(request, fleet.trust_of(request.tenant))
    return ahead < fleet.free_slots[(request.model, owner)]


def defers_to_a_busy_replica(fleet: FleetState, decision: Decision) -> bool:
    """Whether a decision that starts a replica should rather wait for a slot of one already there.

    A step placed on a new replica only because every replica of the model is full waits for that load. A full
    warm replica frees a slot when its shortest lease ends, about its drain over its slots; a full loading one
    once loaded (its queue then drains while the new replica would still load). When that comes no later than
    the new load, the step waits and the scaler, which sizes the model by its objectives, decides on capacity:
    one burst at a model's first load started a second load from the origin beside it, and its steps waited
    for the slower of the two."""
    chosen = decision.chosen
    if chosen is None or chosen.candidate.replica_id is not None:
        return False
    request = decision.request
    owner = boundary_owner(request, fleet.trust_of(request.tenant))
    full = [
        r
        for rid in fleet.replicas_by_model.get(request.model, {})
        if (r := fleet.replicas[rid]).state != "draining"
        and r.boundary == owner
        and not r.has_slot
        and r.node_id not in request.exclude_nodes
        and fleet.nodes[r.node_id].schedulable
    ]
    if not full:
        return False
    # A loading replica's whole load estimate bounds what is left of it (its clock is not kept here).
    soonest = min(r.load_s if r.state == "loading" else r.queue_s / max(r.concurrency, 1) for r in full)
    return soonest <= chosen.terms.get("ttft", 0.0)


def load_in_flight(fleet: FleetState, model: str) -> bool:
    """Whether a replica of `model` is loading: a step waiting now waits for that load, which more capacity
    would not shorten (the scaler's attainment leaves such waits out)."""
    return any(fleet.replicas[r].state == "loading" for r in fleet.replicas_by_model.get(model, {}))


def starts_replica(decision: Decision) -> bool:
    return decision.chosen is not None and decision.chosen.candidate.replica_id is None


def place_scaler_replica(
    fleet: FleetState, model: str, config: PlacementConfig, interactive_prompt_tokens: int | None = None
) -> Decision:
    """Where the scaler's next replica of `model` goes, spread across nodes that do not host the model yet where
    it fits, so one node's loss never takes all its replicas.

    For a model whose recent calls are interactive, `interactive_prompt_tokens` is their long prompt: the
    replica goes where it meets their latency objectives for it. Otherwise it is placed as batch: spot first."""
    hosting = frozenset(fleet.replicas[r].node_id for r in fleet.replicas_by_model.get(model, {}))
    prompt = interactive_prompt_tokens or 0
    request = PlacementRequest(
        model=model,
        tokens=prompt + 1,  # the traffic's prompt: its prefill weighs each GPU type's speed as a step's does
        prompt_tokens=prompt,
        priority="batch" if interactive_prompt_tokens is None else "interactive",
        new_replica_only=True,
        exclude_nodes=hosting,
        traffic_prompt_tokens=prompt,
    )
    decision = place(fleet, request, config)
    if decision.chosen is None and hosting:
        decision = place(fleet, replace(request, exclude_nodes=frozenset()), config)
    return decision
