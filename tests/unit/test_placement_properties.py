"""Placement invariants over random fleets and random sequences of place / apply / release.

GPU memory is never overcommitted; an isolated tenant never shares a GPU; tensor-parallel
replicas sit on one node's whole GPUs; a warm replica with capacity beats a cold load when
both fit; the same fleet and request give the same decision, however the fleet was built.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.pool import (
    DEFAULT_CONFIG,
    Booking,
    Device,
    FleetState,
    ModelSpec,
    Node,
    PlacementRequest,
    Tenant,
    place,
)
from orchestrator.pool.fleet import EPSILON_GIB, StaleDecision

MODELS = (
    ModelSpec("tiny", 2, 2),
    ModelSpec("small", 16, 4),
    ModelSpec("mid", 40, 10, tensor_parallel=(1, 2)),
    ModelSpec("big", 140, 10, tensor_parallel=(2, 4)),
)
TENANTS = (Tenant("s1"), Tenant("s2"), Tenant("i1", "isolated"), Tenant("i2", "isolated"))
DEVICE_KINDS = (("H100-80GB", 80.0, None), ("L4-24GB", 24.0, None), ("A100-80GB", 40.0, "4g.40gb"))

node_specs = st.lists(
    st.tuples(
        st.sampled_from(DEVICE_KINDS),
        st.integers(1, 4),  # devices
        st.sampled_from(["dc1", "dc2"]),
        st.sampled_from(["spot", "on-demand"]),
        st.sets(st.sampled_from([m.name for m in MODELS]), max_size=2),  # weights on disk
    ),
    min_size=1,
    max_size=4,
)
requests = st.builds(
    PlacementRequest,
    model=st.sampled_from([m.name for m in MODELS]),
    tokens=st.integers(1, 20_000),
    prompt_tokens=st.integers(0, 20_000),
    tenant=st.sampled_from([t.id for t in TENANTS]),
    priority=st.sampled_from(["interactive", "batch", "low_priority"]),
    traffic_prompt_tokens=st.integers(0, 20_000),
)
operations = st.lists(
    st.one_of(
        st.tuples(st.just("place"), requests),
        st.tuples(st.just("release"), st.integers(0, 50)),
        st.tuples(st.just("warm"), st.integers(0, 50)),
        st.tuples(st.just("unload"), st.integers(0, 50)),
        st.tuples(st.just("health"), st.integers(0, 3), st.booleans()),
    ),
    max_size=40,
)


def build(specs: list, reverse: bool = False, skip: int | None = None) -> FleetState:
    """The fleet of `specs` (node i is "n<i>"), added in reverse with `reverse`, without node `skip`."""
    fleet = FleetState()
    for m in MODELS:
        fleet.add_model(m)
    for t in TENANTS:
        fleet.add_tenant(t)
    order = list(enumerate(specs))
    for i, ((type_name, memory, mig), n, dc, capacity, cached) in reversed(order) if reverse else order:
        if i == skip:
            continue
        devices = [Device(j, f"n{i}-{j}", type_name, memory, mig_profile=mig) for j in range(n)]
        fleet.add_node(Node(f"n{i}", dc, f"{dc}-z{i % 2}", capacity, 2.5 * n, devices))
        for model in sorted(cached):
            fleet.cache_weights(f"n{i}", model)
    return fleet


def book_and_change(fleet: FleetState, ops: list) -> None:
    """Place each request and book it, then per its action: release the oldest booking, warm the newest's
    replica, or drain the oldest's."""
    bookings: list[Booking] = []
    for request, action in ops:
        decision = place(fleet, request)
        if decision.placed:
            bookings.append(fleet.apply(decision, request.tokens))
        if action == 1 and bookings:
            fleet.release(bookings.pop(0))
        elif action == 2 and bookings and bookings[-1].replica_id in fleet.replicas:
            fleet.mark_warm(bookings[-1].replica_id)
        elif action == 3 and bookings and bookings[0].replica_id in fleet.replicas:
            fleet.set_replica_state(bookings[0].replica_id, "draining")


def check_invariants(fleet: FleetState) -> None:
    on_device: dict[tuple[str, int], list] = {}
    for r in fleet.replicas.values():
        node = fleet.nodes[r.node_id]
        degree = len(r.devices)
        assert degree in fleet.models[r.model].tensor_parallel, "a replica uses an allowed TP degree"
        assert len(set(r.devices)) == degree, "a gang's devices are distinct"
        for i in r.devices:
            dev = node.device(i)  # raises if the device is not on the replica's node
            assert degree == 1 or dev.mig_profile is None, "no TP gang over MIG instances"
            on_device.setdefault((node.id, i), []).append(r)
    for node in fleet.nodes.values():
        for dev in node.devices:
            replicas = on_device.get((node.id, dev.index), [])
            booked = sum(r.per_device_gib for r in replicas)
            assert booked <= dev.memory_gib + EPSILON_GIB * max(len(replicas), 1), "GPU memory overcommitted"
            assert abs(dev.reserved_gib - booked) < 1e-6
            owners = {r.tenant if r.isolated else None for r in replicas}
            assert len(owners) <= 1, f"a GPU shared across a tenant boundary: {owners}"


@settings(max_examples=300, deadline=None)
@given(specs=node_specs, ops=operations)
def test_any_sequence_keeps_memory_isolation_and_gangs(specs: list, ops: list) -> None:
    fleet = build(specs)
    bookings: list[Booking] = []
    for op in ops:
        if op[0] == "place":
            decision = place(fleet, op[1])
            if decision.placed:
                assert decision.chosen is not None
                if op[1].priority == "low_priority":
                    assert decision.chosen.candidate.replica_id is not None, "low_priority never scales up"
                bookings.append(fleet.apply(decision, op[1].tokens))
        elif op[0] == "release" and bookings:
            fleet.release(bookings.pop(op[1] % len(bookings)))
        elif op[0] == "warm" and fleet.replicas:
            fleet.mark_warm(sorted(fleet.replicas)[op[1] % len(fleet.replicas)])
        elif op[0] == "unload" and fleet.replicas:
            fleet.unload(sorted(fleet.replicas)[op[1] % len(fleet.replicas)])
        elif op[0] == "health":
            fleet.set_health(f"n{op[1] % len(specs)}", op[2])
        check_invariants(fleet)
    for booking in bookings:
        fleet.release(booking)
    check_invariants(fleet)


@settings(max_examples=200, deadline=None)
@given(specs=node_specs, ops=st.lists(requests, max_size=12), probe=requests)
def test_same_state_same_decision_however_built(specs: list, ops: list, probe: PlacementRequest) -> None:
    fleets = [build(specs), build(specs, reverse=True)]
    for request in ops:
        decisions = [place(f, request) for f in fleets]
        assert decisions[0] == decisions[1]
        if decisions[0].placed:
            for f, d in zip(fleets, decisions):
                f.apply(d, request.tokens)
    first = place(fleets[0], probe)
    assert place(fleets[0], probe) == first
    assert place(fleets[1], probe) == first


@settings(max_examples=200, deadline=None)
@given(specs=node_specs, ops=st.lists(requests, max_size=12), probe=requests, gone=st.integers(0, 3))
def test_a_removed_node_leaves_no_trace(specs: list, ops: list, probe: PlacementRequest, gone: int) -> None:
    """A node revoked or forgotten is removed with the replicas it held: no GPU stays booked, and every later
    decision is the one a fleet that never had the node makes (same nodes, caches and replicas elsewhere)."""
    fleet = build(specs)
    for request in ops:
        decision = place(fleet, request)
        if decision.placed:
            fleet.apply(decision, request.tokens)
    fleet.remove_node(f"n{gone % len(specs)}")
    check_invariants(fleet)
    never_had_it = build(specs, skip=gone % len(specs))
    for r in sorted(fleet.replicas.values(), key=lambda r: r.id):
        copy = never_had_it.add_replica(
            r.model, r.node_id, r.devices, state=r.state, tenant=r.tenant, load_s=r.load_s, replica_id=r.id
        )
        never_had_it.set_load(copy.id, outstanding_tokens=r.outstanding_tokens, active_leases=r.active_leases)
    assert place(fleet, probe) == place(never_had_it, probe)

    def indexes(f: FleetState) -> tuple:  # an emptied entry (weights evicted everywhere) is as good as none
        return (
            f.shapes,
            {m: ids for m, ids in f.cached_sorted.items() if ids},
            {m: dcs for m, dcs in f.weights_in_dc.items() if +dcs},
            f.tenant_devices,
            f.dedicated_nodes,
        )

    assert indexes(fleet) == indexes(never_had_it)


@settings(max_examples=300, deadline=None)
@given(
    specs=node_specs,
    node_pick=st.integers(0, 3),
    model=st.sampled_from(["tiny", "small"]),
    queue_s=st.floats(0, 5),
    leases=st.integers(0, 31),
    request=requests,
)
def test_warm_replica_with_capacity_beats_a_cold_load(
    specs: list, node_pick: int, model: str, queue_s: float, leases: int, request: PlacementRequest
) -> None:
    """A warm replica whose queue is shorter than any cold start (engine start alone is 20 s) wins."""
    fleet = build(specs)
    node = fleet.nodes[f"n{node_pick % len(specs)}"]
    try:
        replica = fleet.add_replica(model, node.id, (0,), tenant=request.tenant)
    except StaleDecision:
        return
    spec = fleet.models[model]
    fleet.set_load(
        replica.id, active_leases=leases, outstanding_tokens=int(queue_s * spec.tokens_per_s * node.devices[0].speed)
    )
    priority = "batch" if node.capacity == "spot" and request.priority == "interactive" else request.priority
    probe = PlacementRequest(model, request.tokens, tenant=request.tenant, priority=priority)
    decision = place(fleet, probe)
    assert decision.chosen is not None
    assert decision.chosen.candidate.replica_id == replica.id, decision.chosen.candidate
    assert DEFAULT_CONFIG.engine_start_s > 5


@settings(max_examples=200, deadline=None)
@given(specs=node_specs, ops=st.lists(st.tuples(requests, st.integers(0, 3)), max_size=16), probe=requests)
def test_fast_ranking_and_wait_counters_match_a_scan(specs: list, ops: list, probe: PlacementRequest) -> None:
    """The ranking's one-pass total equals the per-term sum, and the waiting path's per-model
    replica counters equal a scan of the replicas, after any sequence of bookings and changes."""
    from orchestrator.pool.scorers import SCORERS, weighted_total

    fleet = build(specs)
    book_and_change(fleet, ops)
    decision = place(fleet, probe)
    for scored in (decision.chosen, decision.runner_up):
        if scored is not None:
            generic = sum(
                getattr(DEFAULT_CONFIG.weights, n) * s(probe, scored.candidate, fleet, DEFAULT_CONFIG)
                for n, s in SCORERS.items()
            )
            assert weighted_total(probe, scored.candidate, fleet, DEFAULT_CONFIG) == generic == scored.total
    expected: dict = {}
    for r in fleet.replicas.values():
        if r.state != "draining":
            c = expected.setdefault((r.model, r.boundary), [0, 0])
            c[0] += 1
            c[1] += r.state == "loading" and not r.has_slot
    assert {k: v for k, v in fleet.replica_counts.items() if v != [0, 0]} == expected


def full_scan(fleet: FleetState, request: PlacementRequest) -> list[float]:
    """Every candidate's total, best first: every replica and every node's best-fit gang, filtered, no index."""
    return [total for total, _ in scored_scan(fleet, request)]


def scored_scan(fleet: FleetState, request: PlacementRequest) -> list[tuple[float, bool]]:
    """`full_scan` with, for each total, whether its candidate is an existing replica (else a new one)."""
    from orchestrator.pool.decision import Candidate
    from orchestrator.pool.filters import boundary_owner, engine_filter, gang_fit, node_filter, replica_filter
    from orchestrator.pool.placement import _degrees_within_quota
    from orchestrator.pool.reasons import never_possible
    from orchestrator.pool.scorers import weighted_total

    model = fleet.models[request.model]
    trust = fleet.trust_of(request.tenant)
    if never_possible(fleet, request, model, trust) is not None:
        return []
    found = (
        []
        if request.new_replica_only
        else [
            Candidate("warm" if r.state == "warm" else "loading", r.node_id, r.devices, r.id)
            for r in fleet.replicas.values()
            if r.model == request.model and replica_filter(request, r, fleet.nodes[r.node_id], trust) is None
        ]
    )
    if request.priority != "low_priority":
        cached, dcs = fleet.cached.get(request.model, set()), fleet.weights_in_dc.get(request.model, {})
        for degree in _degrees_within_quota(fleet, request, model):
            for node in fleet.nodes.values():
                if node_filter(request, node, trust) or engine_filter(model, node):
                    continue
                devices = gang_fit(request, node, degree, model.memory_gib / degree, boundary_owner(request, trust), {})
                if devices is not None:
                    tier = "disk" if node.id in cached else "datacenter" if node.datacenter in dcs else "origin"
                    found.append(Candidate(tier, node.id, devices))  # type: ignore[arg-type]
    return sorted((weighted_total(request, c, fleet, DEFAULT_CONFIG), c.replica_id is not None) for c in found)


@settings(max_examples=300, deadline=None)
@given(specs=node_specs, ops=st.lists(st.tuples(requests, st.integers(0, 3)), max_size=16), probe=requests)
def test_the_indexed_decision_is_exact_for_replicas_and_a_real_candidate_for_new_ones(
    specs: list, ops: list, probe: PlacementRequest
) -> None:
    """Whatever the fleet has been through, place() finds a candidate exactly when a scan of every replica and
    every node finds one; when the scan's best is an existing replica, place() finds that total, and the second
    best too (what its explanation compares with); and what it chooses is always one of the scan's candidates.
    Among new replicas the index reads the nodes that strand least first but keeps candidates_per_tier of each
    shelf, so it is not proven to be the scan's best there (docs/architecture.md): that is not asserted here."""
    fleet = build(specs)
    book_and_change(fleet, ops)
    decision = place(fleet, probe)
    scan = scored_scan(fleet, probe)
    totals = [total for total, _ in scan]
    assert (decision.chosen is None) == (not totals), (decision, totals)
    if decision.chosen is None:
        return
    assert any(abs(decision.chosen.total - t) < 1e-9 for t in totals), (decision.chosen, totals)
    best_total, best_is_replica = scan[0]
    if best_is_replica:
        assert abs(decision.chosen.total - best_total) < 1e-9, (decision.chosen, totals)
        if len(scan) > 1 and scan[1][1]:
            assert decision.runner_up is not None and abs(decision.runner_up.total - totals[1]) < 1e-9, totals


def test_a_partly_used_node_listed_after_fresh_ones_is_still_found() -> None:
    """Three one-GPU nodes, fresh, and a two-GPU node whose GPUs a loading 70B replica fills to 75 of 80 GiB:
    the small model fits in what is left there, stranding almost nothing, where a fresh GPU strands 95% of it.
    The index once read a shelf fewest qualifying devices first and closed it after candidates_per_tier fresh
    nodes, so the partly used one was never scored; it now reads the nodes that strand least first."""
    one = ("H100-80GB", 80.0, None)
    fleet = build(
        [
            (one, 1, "dc1", "spot", set()),
            (one, 1, "dc1", "spot", set()),
            (one, 1, "dc1", "spot", set()),
            (one, 2, "dc1", "spot", set()),
        ]
    )
    small = PlacementRequest(model="tiny", tokens=1, prompt_tokens=0, tenant="s1", priority="interactive")
    book_and_change(
        fleet,
        [
            (small, 0),
            (PlacementRequest(model="big", tokens=1, prompt_tokens=0, tenant="s1", priority="interactive"), 1),
        ],
    )
    decision = place(fleet, small)
    assert decision.chosen is not None and decision.chosen.candidate.node_id == "n3"
    assert abs(decision.chosen.total - full_scan(fleet, small)[0]) < 1e-9


def test_of_the_nodes_caching_a_model_the_one_it_fills_whole_is_found() -> None:
    """Two four-GPU nodes and a one-GPU node, all caching the model: a replica on the one-GPU node fills it, where
    on a four-GPU node it breaks a whole free node. The nodes caching a model were read in id order, so the
    disk shelf closed on the two big ones; they are read in the index's order now."""
    four, one = ("H100-80GB", 80.0, None), ("H100-80GB", 80.0, None)
    fleet = build(
        [(four, 4, "dc1", "spot", {"small"}), (four, 4, "dc1", "spot", {"small"}), (one, 1, "dc1", "spot", {"small"})]
    )
    request = PlacementRequest(model="small", tokens=1, prompt_tokens=0, tenant="s1", priority="interactive")
    decision = place(fleet, request)
    assert decision.chosen is not None and decision.chosen.candidate.node_id == "n2"
    assert abs(decision.chosen.total - full_scan(fleet, request)[0]) < 1e-9


def test_a_node_already_serving_on_other_gpus_is_found_before_fresh_ones_it_would_break() -> None:
    """Two fresh two-GPU nodes, and a four-GPU node whose other two GPUs serve a 140 GiB model: a 40 GiB replica on
    one of its free GPUs breaks no whole free node, where on a fresh two-GPU node it does. Listed after the fresh
    ones (same count of free GPUs, higher id), it was never scored."""
    h100 = ("H100-80GB", 80.0, None)
    fleet = build([(h100, 2, "dc1", "spot", set()), (h100, 2, "dc1", "spot", set()), (h100, 4, "dc1", "spot", set())])
    big = PlacementRequest(
        model="big",
        tokens=1,
        prompt_tokens=0,
        tenant="s1",
        priority="interactive",
        exclude_nodes=frozenset({"n0", "n1"}),
    )
    book_and_change(fleet, [(big, 0)])
    assert any(r.node_id == "n2" for r in fleet.replicas.values())
    mid = PlacementRequest(
        model="mid", tokens=1, prompt_tokens=0, tenant="s1", priority="interactive", tensor_parallel=(1,)
    )
    decision = place(fleet, mid)
    assert decision.chosen is not None and decision.chosen.candidate.node_id == "n2"
    assert abs(decision.chosen.total - full_scan(fleet, mid)[0]) < 1e-9


@settings(max_examples=300, deadline=None)
@given(specs=node_specs, ops=st.lists(st.tuples(requests, st.integers(0, 3)), max_size=16), probe=requests)
def test_no_new_replica_scores_below_its_shelfs_floor(specs: list, ops: list, probe: PlacementRequest) -> None:
    """Placement skips a shelf of free capacity whose floor cannot beat the runner-up, so the floor must be a lower
    bound: every new-replica candidate a full scan finds (co-residents, slow devices and latency objectives
    included) totals at least the floor of its tier on its GPU type's fastest speed."""
    from orchestrator.pool.decision import Candidate
    from orchestrator.pool.filters import boundary_owner, engine_filter, gang_fit, node_filter
    from orchestrator.pool.placement import _degrees_within_quota
    from orchestrator.pool.scorers import new_replica_floor, weighted_total

    fleet = build(specs)
    book_and_change(fleet, ops)
    model = fleet.models[probe.model]
    trust = fleet.trust_of(probe.tenant)
    cached, dcs = fleet.cached.get(probe.model, set()), fleet.weights_in_dc.get(probe.model, {})
    for degree in _degrees_within_quota(fleet, probe, model):
        for node in fleet.nodes.values():
            if node_filter(probe, node, trust) or engine_filter(model, node):
                continue
            devices = gang_fit(probe, node, degree, model.memory_gib / degree, boundary_owner(probe, trust), {})
            if devices is None:
                continue
            tier = "disk" if node.id in cached else "datacenter" if node.datacenter in dcs else "origin"
            total = weighted_total(probe, Candidate(tier, node.id, devices), fleet, DEFAULT_CONFIG)  # type: ignore[arg-type]
            speed = fleet.type_speed[node.device(devices[0]).type_name]
            assert total >= new_replica_floor(probe, fleet, DEFAULT_CONFIG, tier, speed) - 1e-9
