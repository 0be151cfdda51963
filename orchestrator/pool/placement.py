"""place(): hard filters, then a score; the lease is booked by FleetState.apply().

Candidates come from indexes, never from a scan of the fleet: the model's replicas, the
nodes caching its weights, and the best fits of the free-capacity index per locality tier and
capacity class, at most `candidates_per_tier` of each. Every candidate is scored by the
weighted scorers; the lowest total wins, ties broken by tier then stable ids, so the same
fleet and request always give the same decision.
"""

from __future__ import annotations

from dataclasses import fields

from .decision import Candidate, Decision, PlacementRequest, ScoredCandidate, Tier
from .filters import boundary_owner, engine_filter, gang_fit, node_filter, replica_filter
from .fleet import FleetState, ModelSpec, Node, Replica, Trust
from .reasons import never_possible
from .scorers import SCORERS, weighted_total
from .weights import DEFAULT_CONFIG, PlacementConfig

# Nodes caching a model's weights examined per decision: a popular model sits in thousands of
# caches; 512 cheap index checks (~0.1 ms) find the few with room, in node-id order.
DISK_SCAN_LIMIT = 512


def place(fleet: FleetState, request: PlacementRequest, config: PlacementConfig = DEFAULT_CONFIG) -> Decision:
    """Where this request should run now, or why it must wait, or why it never can. Reads only."""
    model = fleet.models.get(request.model)
    if model is None:
        return Decision(request, "never", reason=f"unknown model {request.model!r}")
    trust = fleet.trust_of(request.tenant)
    never = never_possible(fleet, request, model, trust)
    if never is not None:
        return Decision(request, "never", reason=never)

    rejections: dict[str, int] = {}
    candidates = [] if request.new_replica_only else _replica_candidates(fleet, request, trust, config, rejections)
    quota_blocked = False
    capped = request.max_replicas is not None and fleet.live_replicas[request.model] >= request.max_replicas
    if request.priority != "low_priority" and not capped:  # low priority never scales up: warm replicas or wait
        degrees = _degrees_within_quota(fleet, request, model)
        quota_blocked = not degrees
        found: dict[tuple[str, str], int] = {}  # shared across degrees: the smallest gang that fits fills it first
        for degree in degrees:
            candidates.extend(_new_replica_candidates(fleet, request, model, trust, degree, config, found, rejections))
    if not candidates:
        return _waiting(fleet, request, model, quota_blocked, capped, rejections)

    # Totals first (cheap); the full per-term record only for the winner and the runner-up.
    ranked = sorted(
        ((weighted_total(request, c, fleet, config), c.sort_key, c) for c in candidates),
        key=lambda t: (t[0], t[1]),
    )
    chosen = _score(fleet, request, ranked[0][2], config)
    runner_up = _score(fleet, request, ranked[1][2], config) if len(ranked) > 1 else None
    return Decision(
        request,
        "placed",
        chosen=chosen,
        runner_up=runner_up,
        decided_by=_decided_by(chosen, runner_up),
        considered=len(ranked),
        rejections=rejections,
    )


def _score(fleet: FleetState, request: PlacementRequest, cand: Candidate, config: PlacementConfig) -> ScoredCandidate:
    terms = {name: scorer(request, cand, fleet, config) for name, scorer in SCORERS.items()}
    contributions = {name: getattr(config.weights, name) * value for name, value in terms.items()}
    return ScoredCandidate(cand, terms, contributions, sum(contributions.values()))


def _decided_by(chosen: ScoredCandidate, runner_up: ScoredCandidate | None) -> str:
    """The term contributing most to the chosen candidate's margin over the runner-up."""
    if runner_up is None:
        return "only_candidate"
    margins = {name: runner_up.contributions[name] - value for name, value in chosen.contributions.items()}
    best = max(margins.values())
    if best <= 0:
        return "tie_break"  # equal scores: the stable order (tier, node id, devices) decided
    return min(name for name, margin in margins.items() if margin == best)


def _replica_candidates(
    fleet: FleetState, request: PlacementRequest, trust: Trust, config: PlacementConfig, rejections: dict[str, int]
) -> list[Candidate]:
    """The shortest-queue replicas with a free slot on this request's side of the tenant boundary.

    At most `candidates_per_tier` per capacity class, read in queue order from the spare index,
    plus the replica that served the previous step (prefix affinity) wherever it stands.
    """
    out: list[Candidate] = []
    found: dict[str, int] = {}
    k = config.candidates_per_tier

    def consider(replica: Replica) -> None:
        node = fleet.nodes[replica.node_id]
        why = replica_filter(request, replica, node, trust)
        if why is not None:
            rejections[why] = rejections.get(why, 0) + 1
            return
        tier: Tier = "warm" if replica.state == "warm" else "loading"
        out.append(Candidate(tier, replica.node_id, replica.devices, replica.id))
        found[node.capacity] = found.get(node.capacity, 0) + 1

    owner = boundary_owner(request, trust)
    for capacity in ("on-demand", "spot"):
        for _, _, rid in fleet.spare.get((request.model, owner, capacity), ()):
            if found.get(capacity, 0) >= k:
                break
            if rid != request.previous_replica:
                consider(fleet.replicas[rid])
    previous = fleet.replicas.get(request.previous_replica or "")
    if previous is not None and previous.model == request.model:
        consider(previous)
    return out


def _degrees_within_quota(fleet: FleetState, request: PlacementRequest, model: ModelSpec) -> list[int]:
    degrees = sorted(set(request.tensor_parallel or model.tensor_parallel))
    tenant = fleet.tenants.get(request.tenant or "")
    if tenant is None or tenant.gpu_quota is None:
        return degrees
    held = fleet.tenant_devices[tenant.id]
    return [d for d in degrees if held + d <= tenant.gpu_quota]


def _new_replica_candidates(
    fleet: FleetState,
    request: PlacementRequest,
    model: ModelSpec,
    trust: Trust,
    degree: int,
    config: PlacementConfig,
    found: dict[tuple[str, str], int],
    rejections: dict[str, int],
) -> list[Candidate]:
    """The best few nodes per (tier, capacity class) to start a replica on `degree` devices.

    `found` counts candidates per (tier, capacity class) across calls: degrees are tried from
    the smallest, so fewer GPUs per replica (less price, less fragmentation) fill the budget first.
    """
    need = model.memory_gib / degree
    owner = boundary_owner(request, trust)
    cached = fleet.cached.get(request.model, set())
    dcs_with_weights = fleet.weights_in_dc.get(request.model, {})
    out: list[Candidate] = []
    k = config.candidates_per_tier

    def consider(node: Node, tier: Tier) -> None:
        if found.get((tier, node.capacity), 0) >= k:
            return
        why = node_filter(request, node, trust) or engine_filter(model, node)
        if why is not None:
            rejections[why] = rejections.get(why, 0) + 1
            return
        devices = gang_fit(request, node, degree, need, owner, rejections)
        if devices is not None:
            out.append(Candidate(tier, node.id, devices))
            found[(tier, node.capacity)] = found.get((tier, node.capacity), 0) + 1

    if trust == "dedicated":
        # A dedicated tenant's nodes are few and outside the shared index: check each one.
        for node_id in fleet.dedicated_nodes.get(request.tenant or "", ()):
            node = fleet.nodes[node_id]
            tier: Tier = (
                "disk" if node_id in cached else "datacenter" if node.datacenter in dcs_with_weights else "origin"
            )
            consider(node, tier)
        return out

    for examined, node_id in enumerate(fleet.cached_sorted.get(request.model, ())):
        if examined >= DISK_SCAN_LIMIT or (found.get(("disk", "spot"), 0) >= k and found.get(("disk", "on-demand"), 0) >= k):
            break
        if fleet.free_index.may_fit(node_id, need, degree):
            consider(fleet.nodes[node_id], "disk")
    for group in fleet.free_index.groups():
        dc, type_name, capacity = group
        if request.gpu_types is not None and type_name not in request.gpu_types:
            continue
        tier = "datacenter" if dc in dcs_with_weights else "origin"
        if found.get((tier, capacity), 0) >= k:
            continue
        if tier == "origin" and max(found.get(("disk", capacity), 0), found.get(("datacenter", capacity), 0)) >= k:
            continue  # nearer copies already offer enough; a WAN copy would not win
        for node_id in fleet.free_index.nodes(group, need, degree):
            if found.get((tier, capacity), 0) >= k:
                break
            if node_id not in cached:
                consider(fleet.nodes[node_id], tier)
    return out


def _waiting(
    fleet: FleetState, request: PlacementRequest, model: ModelSpec, quota_blocked: bool, capped: bool,
    rejections: dict[str, int],
) -> Decision:
    """Nothing fits now: say which wait it is, for the task's `waiting_for_gpu` status."""
    stopped = ", ".join(f"{name}: {n}" for name, n in sorted(rejections.items(), key=lambda kv: (-kv[1], kv[0])))
    detail = f" (ruled out: {stopped})" if stopped else ""
    # Per-(model, boundary) counters kept by FleetState: no scan of a popular model's replicas.
    owner = boundary_owner(request, fleet.trust_of(request.tenant))
    mine, loading_full = fleet.replica_counts.get((request.model, owner), (0, 0))
    if request.priority == "low_priority":
        reason = f"low_priority never starts a replica; no warm replica of {model.name} has a free slot{detail}"
        return Decision(request, "wait", reason=reason, wait_reason="low_priority", rejections=rejections)
    if quota_blocked:
        tenant = fleet.tenants[request.tenant or ""]
        reason = (
            f"tenant {tenant.id} holds {fleet.tenant_devices[tenant.id]} of its {tenant.gpu_quota} GPUs; "
            f"a new replica of {model.name} needs {min(request.tensor_parallel or model.tensor_parallel)} more"
        )
        return Decision(request, "wait", reason=reason, wait_reason="tenant_quota", rejections=rejections)
    if loading_full:
        reason = f"a replica of {model.name} is loading and already has all the leases it can take{detail}"
        return Decision(request, "wait", reason=reason, wait_reason="cold_start", rejections=rejections)
    if capped:
        reason = (f"every replica of {model.name} is at its concurrency and the model is at its max_replicas "
                  f"({request.max_replicas}){detail}")
        return Decision(request, "wait", reason=reason, wait_reason="busy", rejections=rejections)
    if mine:
        reason = f"every replica of {model.name} is at its concurrency and no free GPUs fit a new one{detail}"
        return Decision(request, "wait", reason=reason, wait_reason="busy", rejections=rejections)
    degrees = request.tensor_parallel or model.tensor_parallel
    shapes = " or ".join(f"{d} free GPU(s) with ≥ {model.memory_gib / d:g} GiB" for d in sorted(degrees))
    reason = f"no node has {shapes} for {model.name} now{detail}"
    return Decision(request, "wait", reason=reason, wait_reason="no_capacity", rejections=rejections)


WEIGHT_NAMES = tuple(f.name for f in fields(DEFAULT_CONFIG.weights))
assert set(WEIGHT_NAMES) == set(SCORERS), "every scorer needs a weight and every weight a scorer"
