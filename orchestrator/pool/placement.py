"""place(): hard filters, then a score; the lease is booked by FleetState.apply().

Candidates come from indexes, never from a scan of the fleet: the first replicas of each class of the
model's replicas with a free slot (`spare.py`: within a class the first is the best), then, only where
it could win, new replicas: the nodes caching the model's weights and the best fits of the free-capacity
index, `candidates_per_tier` per shelf (locality tier, capacity class, GPU type). A shelf is skipped when
its floor, the least any new replica there could score, is above the runner-up found so far: a request
that warm replicas serve well reads no free capacity at all. Every candidate is scored by the
weighted scorers; the lowest total wins, ties broken by tier then stable ids, so the same fleet and
request always give the same decision.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields

from .capacity import FreeCapacityIndex, bucket_below
from .decision import Candidate, Decision, PlacementRequest, ScoredCandidate, Tier
from .filters import boundary_owner, engine_filter, gang_fit, node_filter, replica_filter
from .fleet import FleetState, ModelSpec, Node, Replica, Trust
from .reasons import never_possible
from .scorers import SCORERS, new_replica_floor, weighted_total
from .weights import DEFAULT_CONFIG, PlacementConfig

# A model cached on at most this many nodes has them all ranked for the disk tier, in the index's order (an index
# check each: 64 keep a decision's p99 under a millisecond at 10,000 nodes, 512 did not); one in more caches (a
# popular model, in hundreds or thousands) finds them through the free-capacity index instead, in the same order.
DISK_SCAN_LIMIT = 64
# Nodes of the free-capacity index read per shelf at most: the index offers a superset (its memory buckets are
# coarser than a model's need) in best-fit order, so the first few hundred hold the shelf's few best fits.
SHELF_SCAN_LIMIT = 256
# Replicas offered by each class of replica: the best, and a runner-up for the decision's explanation.
PER_CLASS = 2


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
    scored = [(weighted_total(request, c, fleet, config), c.sort_key, c) for c in candidates]
    if request.priority != "low_priority" and not capped:  # low priority never scales up: warm replicas or wait
        degrees = _degrees_within_quota(fleet, request, model)
        quota_blocked = not degrees
        found: dict[Shelf, int] = {}  # shared across degrees: the smallest gang fills it first
        for degree in degrees:
            _add_new_replica_candidates(fleet, request, model, trust, degree, config, found, rejections, scored)
    if not scored:
        return _waiting(fleet, request, model, quota_blocked, capped, rejections)

    # Totals first (cheap); the full per-term record only for the winner and the runner-up.
    ranked = sorted(scored, key=lambda t: (t[0], t[1]))
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
    """The best replicas with a free slot on this request's side of the tenant boundary, and the runners-up.

    Every class of replica (`spare.py`) offers its first PER_CLASS that pass the filters: among replicas of one
    class the score only grows with the wait, so these include the exact best. The replica that served the
    previous step (prefix affinity) is added wherever it stands. Negative weights would break that order: then
    every replica is read.
    """
    out: list[Candidate] = []
    per_class = PER_CLASS if config.weights.ttft >= 0 and config.weights.cost >= 0 else None

    def consider(replica: Replica) -> bool:
        why = replica_filter(request, replica, fleet.nodes[replica.node_id], trust)
        if why is not None:
            rejections[why] = rejections.get(why, 0) + 1
            return False
        tier: Tier = "warm" if replica.state == "warm" else "loading"
        out.append(Candidate(tier, replica.node_id, replica.devices, replica.id))
        return True

    owner = boundary_owner(request, trust)
    for capacity in ("on-demand", "spot"):
        for entries in fleet.spare.classes((request.model, owner, capacity)):
            taken = 0
            for _, _, _, rid in entries:
                if taken == per_class:
                    break
                if rid != request.previous_replica and consider(fleet.replicas[rid]):
                    taken += 1
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


def _add_new_replica_candidates(
    fleet: FleetState,
    request: PlacementRequest,
    model: ModelSpec,
    trust: Trust,
    degree: int,
    config: PlacementConfig,
    found: dict[Shelf, int],
    rejections: dict[str, int],
    scored: list[tuple[float, tuple, Candidate]],
) -> None:
    """Add to `scored` the best few nodes per shelf (tier, capacity class, GPU type) to start a replica on.

    `found` counts candidates per shelf across calls: degrees are tried from the smallest, so fewer GPUs per
    replica (less price, less fragmentation) fill the budget first.
    """
    search = _NewReplicaSearch(fleet, request, model, trust, degree, config, found, rejections, scored)
    if trust == "dedicated":
        # A dedicated tenant's nodes are few and outside the shared index: check each one.
        for node_id in fleet.dedicated_nodes.get(request.tenant or "", ()):
            search.consider(fleet.nodes[node_id])
        return
    groups = [g for g in search.index.groups() if request.gpu_types is None or g[1] in request.gpu_types]
    if search.owner is not None:
        search.read_own_nodes()
    if search.few_caches:
        search.read_caches(groups)
    search.read_shelves(groups)


Shelf = tuple[Tier, str, str]  # (locality tier, capacity class, GPU type)


class _NewReplicaSearch:
    """One decision's search of free capacity for a new replica on `degree` devices.

    Each GPU type has its own shelves: a type twice as fast writes an answer in half the time, so the best new
    replica may be on any type. A shelf is not searched at all when its floor (`new_replica_floor`: the least
    any new replica there could score) is above the second-best total found so far, which is what makes most
    decisions, served by warm replicas, read no free capacity: nothing skipped could have been the winner or
    the runner-up, so the decision's explanation (what it beat, and by which term) is the full ranking's too.
    """

    def __init__(
        self,
        fleet: FleetState,
        request: PlacementRequest,
        model: ModelSpec,
        trust: Trust,
        degree: int,
        config: PlacementConfig,
        found: dict[Shelf, int],
        rejections: dict[str, int],
        scored: list[tuple[float, tuple, Candidate]],
    ) -> None:
        self.fleet, self.request, self.model, self.trust, self.degree = fleet, request, model, trust, degree
        self.config, self.found, self.rejections, self.scored = config, found, rejections, scored
        self.need = model.memory_gib / degree
        self.owner = boundary_owner(request, trust)
        self.cached = fleet.cached.get(request.model, set())
        self.dcs_with_weights: Mapping[str, int] = fleet.weights_in_dc.get(request.model, {})
        self.k = config.candidates_per_tier
        self.prune = min(vars(config.weights).values()) >= 0  # the floors hold only then
        self.best_two = sorted(total for total, _, _ in scored)[:2]
        self.floors: dict[tuple[str, str], float] = {}
        self.open_disk_shelves: set[Shelf] = set()
        # An isolated tenant may take only devices no one uses, or its own (read apart, first).
        self.index = fleet.empty_index if self.owner is not None else fleet.free_index
        self.own_nodes: Mapping[str, int] = fleet.isolated_nodes.get(self.owner, {}) if self.owner is not None else {}
        # A model in a few caches has them all read; one in thousands (a popular model) finds its cached nodes
        # among the free-capacity index's nodes instead, where most of them are (most are full).
        self.few_caches = len(self.cached) <= DISK_SCAN_LIMIT

    def floor(self, tier: str, type_name: str) -> float:
        if (tier, type_name) not in self.floors:
            self.floors[(tier, type_name)] = new_replica_floor(
                self.request, self.fleet, self.config, tier, self.fleet.type_speed[type_name]
            )
        return self.floors[(tier, type_name)]

    def beaten(self, tier: str, type_name: str) -> bool:
        """Whether no new replica of `tier` on this GPU type can beat the runner-up found so far."""
        return self.prune and len(self.best_two) == 2 and self.floor(tier, type_name) > self.best_two[1]

    def still_open(self, shelf: Shelf) -> bool:
        return self.found.get(shelf, 0) < self.k and not self.beaten(shelf[0], shelf[2])

    def tier_of(self, node: Node) -> Tier:
        if node.id in self.cached:
            return "disk"
        return "datacenter" if node.datacenter in self.dcs_with_weights else "origin"

    def consider(self, node: Node, tier: Tier | None = None) -> bool:
        """Score the node's best-fit gang, if it passes the filters and its shelf still takes one; whether it did
        (only then may a shelf have closed)."""
        tier = tier or self.tier_of(node)
        if not any(self.still_open((tier, node.capacity, t)) for t in node.type_names):
            return False  # every shelf it could fill is full, or cannot win: no gang fit to try
        why = node_filter(self.request, node, self.trust) or engine_filter(self.model, node)
        if why is not None:
            self.rejections[why] = self.rejections.get(why, 0) + 1
            return False
        devices = gang_fit(self.request, node, self.degree, self.need, self.owner, self.rejections)
        if devices is None:
            return False
        shelf = (tier, node.capacity, node.device(devices[0]).type_name)
        if self.found.get(shelf, 0) >= self.k:
            return False
        self.found[shelf] = self.found.get(shelf, 0) + 1
        if self.found[shelf] == self.k:
            self.open_disk_shelves.discard(shelf)
        candidate = Candidate(tier, node.id, devices)
        total = weighted_total(self.request, candidate, self.fleet, self.config)
        self.scored.append((total, candidate.sort_key, candidate))
        self.best_two[:] = sorted([*self.best_two, total])[:2]
        return True

    def read_own_nodes(self) -> None:
        """An isolated tenant's own nodes: the only ones where it may join devices already in use. Read from the
        tenant's own index (its devices and the unused ones on those nodes) shelf by shelf, as the free-capacity
        index is: a tenant with replicas on thousands of nodes made reading them all, in id order, the slowest
        part of its cold decisions."""
        own = self.fleet.own_index.get(self.owner or "")
        if own is not None:
            types = self.request.gpu_types
            self.read_shelves([g for g in own.groups() if types is None or g[1] in types], own)

    def read_caches(self, groups: list[tuple[str, str, str]]) -> None:
        """Every node caching the model, in the free-capacity index's order (the one that strands least), while a
        disk shelf is still open: in id order a shelf closed on the first
        nodes it met, and a four-GPU node broken for a model a one-GPU node beside it held whole."""
        self.open_disk_shelves.update(
            ("disk", capacity, type_name)
            for _, type_name, capacity in groups
            if self.still_open(("disk", capacity, type_name))
        )
        if not self.open_disk_shelves:
            return
        bucket, nodes, shelves = bucket_below(self.need), self.fleet.nodes, self.open_disk_shelves
        ranked: list[tuple[tuple[int, int], str]] = []
        for node_id in self.fleet.cached_sorted.get(self.request.model, ()):
            if node_id in self.own_nodes:
                continue
            node = nodes[node_id]
            best = None
            for t in node.type_names:
                if ("disk", node.capacity, t) in shelves:
                    rank = self.index.fit_rank(node_id, t, bucket, self.degree)
                    if rank is not None and (best is None or rank < best):
                        best = rank
            if best is not None:
                ranked.append((best, node_id))
        ranked.sort()
        for _, node_id in ranked:
            if not self.open_disk_shelves:
                break
            node = self.fleet.nodes[node_id]
            if any(("disk", node.capacity, t) in self.open_disk_shelves for t in node.type_names):
                self.consider(node, "disk")

    def read_shelves(self, groups: list[tuple[str, str, str]], own: FreeCapacityIndex | None = None) -> None:
        """The free-capacity index (or the tenant's `own` one), shelf by shelf, the most promising first, so the
        best found prunes the rest."""
        by_shelf: dict[Shelf, list[tuple[str, str, str]]] = {}
        for group in groups:
            dc, type_name, capacity = group
            tier: Tier = "datacenter" if dc in self.dcs_with_weights else "origin"
            by_shelf.setdefault((tier, capacity, type_name), []).append(group)
        for shelf in sorted(by_shelf, key=lambda sh: (self.floor(sh[0], sh[2]) if self.prune else 0.0, sh)):
            self.read_shelf(shelf, by_shelf[shelf], own)

    def read_shelf(self, shelf: Shelf, groups: list[tuple[str, str, str]], own: FreeCapacityIndex | None) -> None:
        """One shelf's nodes across its datacenters, tightest fit first; cached ones fill the disk shelf. The
        tenant's own nodes are read from its `own` index only (read_caches skips them too)."""
        tier, capacity, type_name = shelf
        disk_shelf: Shelf = ("disk", capacity, type_name)
        # Cached nodes sit in their dc's groups: read here when read_caches did not read them all.
        wants_disk = (own is not None or not self.few_caches) and self.still_open(disk_shelf)
        wants_here = self.still_open(shelf)
        if not (wants_disk or wants_here):
            return
        index = own if own is not None else self.index
        for examined, node_id in enumerate(index.nodes_across(groups, self.need, self.degree)):
            if examined == SHELF_SCAN_LIMIT:
                break
            if own is None and node_id in self.own_nodes:
                continue
            if node_id in self.cached:
                added = wants_disk and self.consider(self.fleet.nodes[node_id], "disk")
            else:
                added = wants_here and self.consider(self.fleet.nodes[node_id], tier)
            if added:  # shelves close only when a candidate is added (found, or the runner-up to beat, moved)
                wants_disk = wants_disk and self.still_open(disk_shelf)
                wants_here = self.still_open(shelf)
                if not (wants_disk or wants_here):
                    break


def _waiting(
    fleet: FleetState,
    request: PlacementRequest,
    model: ModelSpec,
    quota_blocked: bool,
    capped: bool,
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
        reason = (
            f"every replica of {model.name} is at its concurrency and the model is at its max_replicas "
            f"({request.max_replicas}){detail}"
        )
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
