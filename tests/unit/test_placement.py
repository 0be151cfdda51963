"""Placement: each hard filter, each scorer, the why-not reasons, and apply/release bookkeeping."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from orchestrator.config import BerthConfig
from orchestrator.pool import (
    DEFAULT_CONFIG,
    Device,
    FleetState,
    ModelSpec,
    Node,
    PlacementRequest,
    StaleDecision,
    Tenant,
    place,
    tuned,
)
from orchestrator.pool.decision import Candidate
from orchestrator.pool.scorers import affinity, capacity_class, cost, fragmentation, generation, ttft
from sdk.wire.objectives import LatencyObjectives

SMALL = ModelSpec("llama-3.1-8b", weights_gib=16, kv_headroom_gib=4, usd_per_1m_tokens=0.3)
BIG = ModelSpec("llama-3.1-70b", weights_gib=140, kv_headroom_gib=10, tensor_parallel=(2, 4))
BIG_TP1 = ModelSpec("llama-3.1-70b-tp1", weights_gib=140, kv_headroom_gib=10, tensor_parallel=(1,))


def gpus(
    n: int, type_name: str = "H100-80GB", memory: float = 80, speed: float = 1.0, prefix: str = ""
) -> list[Device]:
    return [Device(i, f"{prefix}{type_name}-{i}", type_name, memory, speed) for i in range(n)]


def node(
    node_id: str,
    devices: list[Device] | None = None,
    dc: str = "dc1",
    zone: str = "z1",
    capacity: str = "on-demand",
    price: float = 20.0,
    **kw: object,
) -> Node:
    return Node(node_id, dc, zone, capacity, price, devices if devices is not None else gpus(8, prefix=node_id), **kw)  # type: ignore[arg-type]


def fleet(
    *nodes: Node, models: tuple[ModelSpec, ...] = (SMALL, BIG, BIG_TP1), tenants: tuple[Tenant, ...] = ()
) -> FleetState:
    f = FleetState()
    for n in nodes:
        f.add_node(n)
    for m in models:
        f.add_model(m)
    for t in tenants:
        f.add_tenant(t)
    return f


def req(model: str = "llama-3.1-8b", **kw: object) -> PlacementRequest:
    return PlacementRequest(model=model, tokens=kw.pop("tokens", 4000), **kw)  # type: ignore[arg-type]


# --- hard filters ---------------------------------------------------------------------------


def test_unhealthy_and_draining_nodes_are_never_chosen() -> None:
    f = fleet(node("a"), node("b"), node("c"))
    f.set_health("a", False)
    f.set_draining("b", True)
    d = place(f, req())
    assert d.chosen is not None and d.chosen.candidate.node_id == "c"
    f.set_health("c", False)
    d = place(f, req())
    assert d.outcome == "wait" and d.wait_reason == "no_capacity"


def test_warm_replica_on_a_draining_node_is_not_leased() -> None:
    f = fleet(node("a"), node("b"))
    r = f.add_replica("llama-3.1-8b", "a", (0,))
    f.set_draining("a", True)
    d = place(f, req())
    assert d.chosen is not None and d.chosen.candidate.replica_id != r.id
    assert d.rejections.get("draining") == 1


def test_memory_must_fit_with_headroom() -> None:
    # 20 GiB need (16 weights + 4 KV): a 16 GiB device is too small even though the weights fit.
    f = fleet(node("a", gpus(1, "T4-16GB", 16)), node("b", gpus(1, "L4-24GB", 24)))
    d = place(f, req())
    assert d.chosen is not None and d.chosen.candidate.node_id == "b"


def test_gpu_type_restriction() -> None:
    f = fleet(node("a", gpus(8, "L4-24GB", 24)), node("b", gpus(8)))
    d = place(f, req(gpu_types=frozenset({"H100-80GB"})))
    assert d.chosen is not None and d.chosen.candidate.node_id == "b"


def test_a_new_replica_goes_only_to_a_node_that_runs_its_engine() -> None:
    tiny = ModelSpec("smollm2-135m", weights_gib=0.1, kv_headroom_gib=0.5, engine="llama.cpp")
    f = fleet(
        node("h100", engines=frozenset({"simulated"})),
        node("cpu", gpus(1, "CPU-16GB", 16, 0.0004), engines=frozenset({"llama.cpp"})),
        models=(SMALL, tiny),
    )
    d = place(f, req("smollm2-135m"))
    assert d.chosen is not None and d.chosen.candidate.node_id == "cpu"
    assert d.rejections.get("engine") == 1  # the H100 is far faster, but runs no llama.cpp
    d = place(f, req())
    assert d.chosen is not None and d.chosen.candidate.node_id == "h100"  # nor does the CPU node run simulated
    f.set_health("cpu", False)
    assert place(f, req("smollm2-135m")).outcome == "wait"


def test_a_node_that_does_not_say_its_engines_takes_any() -> None:
    tiny = ModelSpec("smollm2-135m", weights_gib=0.1, kv_headroom_gib=0.5, engine="llama.cpp")
    d = place(fleet(node("old"), models=(tiny,)), req("smollm2-135m"))
    assert d.chosen is not None and d.chosen.candidate.node_id == "old"


def test_tensor_parallel_gang_never_spans_nodes() -> None:
    a, b = node("a", gpus(2)), node("b", gpus(2))
    f = fleet(a, b)
    f.add_replica("llama-3.1-8b", "a", (0,))
    f.add_replica("llama-3.1-8b", "b", (0,))
    # 150 GiB at TP 2 needs 75 GiB on each of two devices: each node has only one free device.
    d = place(f, req("llama-3.1-70b"))
    assert d.outcome == "wait" and d.wait_reason == "no_capacity"
    f.unload(next(iter(f.replicas)))
    d = place(f, req("llama-3.1-70b"))
    assert d.chosen is not None and d.chosen.candidate.node_id == "a" and d.chosen.candidate.devices == (0, 1)


def test_mig_instances_are_devices_of_their_own_but_never_ganged() -> None:
    migs = [Device(i, f"mig-{i}", "A100-80GB", 40, mig_profile="4g.40gb") for i in range(2)]
    f = fleet(node("a", migs), models=(SMALL, ModelSpec("m60", 50, 10, tensor_parallel=(2,))))
    d = place(f, req())
    assert d.chosen is not None and d.chosen.candidate.devices in ((0,), (1,))
    assert place(f, req("m60")).outcome == "never"


def test_isolated_tenant_never_joins_a_shared_gpu_and_nobody_joins_its_own() -> None:
    # 24 GiB devices: one 20 GiB replica leaves too little for a second, so packing cannot hide the boundary.
    f = fleet(node("a", gpus(2, "L4-24GB", 24)), tenants=(Tenant("acme", "isolated"),))
    shared = f.add_replica("llama-3.1-8b", "a", (0,))
    f.set_load(shared.id, active_leases=shared.concurrency)  # full: acme could not use it anyway
    d = place(f, req(tenant="acme"))
    assert d.chosen is not None and d.chosen.candidate.devices == (1,)
    f.apply(d, 4000)
    # A shared tenant may not lease acme's replica nor load onto acme's device.
    f.set_load(shared.id, active_leases=0)
    d2 = place(f, req(tenant="other"))
    assert d2.chosen is not None and d2.chosen.candidate.replica_id == shared.id
    f.set_load(shared.id, active_leases=shared.concurrency)
    d3 = place(f, req(tenant="other"))
    assert d3.outcome == "wait" and d3.wait_reason == "busy"  # acme's replica and device are not offered


def test_an_isolated_tenants_own_index_lists_only_the_devices_it_may_take_while_it_holds_the_node() -> None:
    """Its own devices and the unused ones of the nodes it holds replicas on, nothing of a node it left, and a
    second replica of it lands beside its first on the device it already holds (what the own index is read for)."""
    f = fleet(node("a", gpus(2)), node("b", gpus(2)), tenants=(Tenant("acme", "isolated"),))
    first = f.add_replica("llama-3.1-8b", "a", (0,), tenant="acme")
    f.add_replica("llama-3.1-8b", "b", (0,))  # a shared replica: device 0 of b is out of acme's reach
    own = f.own_index["acme"]
    assert list(own.nodes_across(own.groups(), 20.0, 1)) == ["a"]
    assert own.may_fit("a", 50.0, 2)  # its own device 0 (56 GiB free) and the unused device 1
    other = ModelSpec("qwen2.5-7b", weights_gib=14, kv_headroom_gib=4)
    f.add_model(other)
    d = place(f, req("qwen2.5-7b", tenant="acme", priority="batch"))
    assert (d.chosen.candidate.node_id, d.chosen.candidate.devices) == ("a", (0,))  # type: ignore[union-attr]
    f.unload(first.id)
    assert list(own.nodes_across(own.groups(), 1.0, 1)) == []


def test_isolated_tenant_does_not_lease_another_tenants_warm_replica() -> None:
    f = fleet(node("a", gpus(1)), node("b", gpus(1)), tenants=(Tenant("acme", "isolated"), Tenant("beta", "isolated")))
    theirs = f.add_replica("llama-3.1-8b", "a", (0,), tenant="beta")
    d = place(f, req(tenant="acme"))
    assert d.chosen is not None and d.chosen.candidate.replica_id is None and d.chosen.candidate.node_id == "b"
    assert place(f, req(tenant="beta")).chosen.candidate.replica_id == theirs.id  # type: ignore[union-attr]


def test_dedicated_tenant_only_on_its_labelled_nodes_and_others_stay_off_them() -> None:
    f = fleet(
        node("a"),
        node("z-ded", labels={"dedicated": "bank"}),
        tenants=(Tenant("bank", "dedicated"),),
    )
    assert place(f, req(tenant="bank")).chosen.candidate.node_id == "z-ded"  # type: ignore[union-attr]
    assert place(f, req(tenant="shop")).chosen.candidate.node_id == "a"  # type: ignore[union-attr]
    f.set_health("a", False)
    assert place(f, req(tenant="shop")).outcome == "wait"


def test_exclusions_by_node_and_zone() -> None:
    f = fleet(node("a", zone="z1"), node("b", zone="z2"), node("c", zone="z3"))
    d = place(f, req(exclude_nodes=frozenset({"a"}), exclude_zones=frozenset({"z2"})))
    assert d.chosen is not None and d.chosen.candidate.node_id == "c"


# --- scorers --------------------------------------------------------------------------------


def test_locality_tiers_order_warm_disk_datacenter_origin() -> None:
    f = fleet(node("a"), node("b"), node("c"), node("d", dc="dc2"), node("e", dc="dc2"))
    f.cache_weights("b", "llama-3.1-8b")
    f.cache_weights("c", "llama-3.1-8b")
    r = f.add_replica("llama-3.1-8b", "a", (0,))
    f.set_load(r.id, outstanding_tokens=1000)
    request = req()
    cands = {
        "warm": Candidate("warm", "a", (0,), r.id),
        "disk": Candidate("disk", "b", (0,)),
        "datacenter": Candidate("datacenter", "d", (0,)),
        "origin": Candidate("origin", "e", (0,)),
    }
    values = [ttft(request, c, f, DEFAULT_CONFIG) for c in cands.values()]
    assert values == sorted(values) and len(set(values)) == 4
    assert place(f, request).chosen.candidate.tier == "warm"  # type: ignore[union-attr]
    f.unload(r.id)
    assert place(f, request).chosen.candidate.tier == "disk"  # type: ignore[union-attr]
    f.evict_weights("b", "llama-3.1-8b")
    f.set_health("c", False)
    assert place(f, request).chosen.candidate.tier == "datacenter"  # type: ignore[union-attr]


def test_queue_wait_counts_tokens_not_requests() -> None:
    f = fleet(node("a"), node("b"))
    many_small = f.add_replica("llama-3.1-8b", "a", (0,))
    few_large = f.add_replica("llama-3.1-8b", "b", (0,))
    f.set_load(many_small.id, active_leases=10, outstanding_tokens=5_000)
    f.set_load(few_large.id, active_leases=2, outstanding_tokens=100_000)
    d = place(f, req())
    assert d.chosen is not None and d.chosen.candidate.replica_id == many_small.id
    assert d.decided_by == "ttft"


def test_a_busy_replica_with_a_free_slot_beats_a_cold_load() -> None:
    # 20 agent steps of 22k tokens each: 176 s for the batch to drain, but the 21st joins it at once.
    f = fleet(node("a"), node("b"))
    f.cache_weights("b", "llama-3.1-8b")
    busy = f.add_replica("llama-3.1-8b", "a", (0,))
    f.set_load(busy.id, active_leases=20, outstanding_tokens=20 * 22_000)
    d = place(f, req(prompt_tokens=20_000, tokens=22_000))
    assert d.chosen is not None and d.chosen.candidate.replica_id == busy.id
    assert d.chosen.terms["ttft"] == pytest.approx(busy.queue_s / busy.concurrency)
    assert d.runner_up is not None and d.runner_up.candidate.replica_id is None  # a load: ~30 s more
    f.set_load(busy.id, active_leases=busy.concurrency)  # full: only now does a step start a replica
    assert place(f, req(prompt_tokens=20_000, tokens=22_000)).chosen.candidate.replica_id is None  # type: ignore[union-attr]


def test_a_long_answer_goes_to_the_fast_gpu_and_a_short_one_to_the_cheap_one() -> None:
    f = fleet(
        node("fast", gpus(1, "H100-80GB", 80, speed=1.0), price=2.99),
        node("slow", gpus(1, "L4-24GB", 24, speed=0.122), price=0.805),
    )
    # Objectives loose enough for both GPUs: then speed and cost trade, as the terms weigh them.
    loose = LatencyObjectives(ttft_s=60.0, tpot_s=1.0)
    long_answer = req(prompt_tokens=2_000, tokens=3_000, objectives=loose)
    short_answer = req(prompt_tokens=2_000, tokens=2_016, objectives=loose)
    on = {n: Candidate("origin", n, (0,)) for n in ("fast", "slow")}
    assert generation(long_answer, on["slow"], f, DEFAULT_CONFIG) == pytest.approx(
        8.1 * generation(long_answer, on["fast"], f, DEFAULT_CONFIG), rel=0.05
    )  # 1 / 0.122
    d = place(f, long_answer)
    assert d.chosen.candidate.node_id == "fast" and d.decided_by == "generation"  # type: ignore[union-attr]
    assert place(f, short_answer).chosen.candidate.node_id == "slow"  # type: ignore[union-attr]


def test_a_gpu_that_cannot_meet_the_interactive_objectives_loses_even_when_cheaper() -> None:
    """Interactive defaults ask 50 ms per token: an L4's full batch of an 8B writes one every ~105 ms, so even a
    short answer goes to the H100, and the objective is what decided."""
    f = fleet(
        node("fast", gpus(1, "H100-80GB", 80, speed=1.0), price=2.99),
        node("slow", gpus(1, "L4-24GB", 24, speed=0.122), price=0.805),
    )
    d = place(f, req(prompt_tokens=2_000, tokens=2_016))
    assert d.chosen.candidate.node_id == "fast" and d.decided_by == "objective"  # type: ignore[union-attr]
    assert d.runner_up is not None and d.runner_up.terms["objective"] > d.chosen.terms["objective"]  # type: ignore[union-attr]


def test_cost_grosses_up_spot_by_its_risk() -> None:
    f = fleet(node("a", capacity="spot", price=20.0), node("b", price=20.0))
    request = req()
    spot = cost(request, Candidate("origin", "a", (0,)), f, DEFAULT_CONFIG)
    on_demand = cost(request, Candidate("origin", "b", (0,)), f, DEFAULT_CONFIG)
    assert spot == pytest.approx(on_demand * (1 + DEFAULT_CONFIG.spot_preemption_risk))


def test_fragmentation_prefers_the_smaller_gpu_and_the_partly_used_node() -> None:
    f = fleet(node("a", gpus(1, "H100-80GB", 80)), node("b", gpus(1, "L4-24GB", 24)), node("c", gpus(2)))
    request = req()
    big = fragmentation(request, Candidate("origin", "a", (0,)), f, DEFAULT_CONFIG)
    small = fragmentation(request, Candidate("origin", "b", (0,)), f, DEFAULT_CONFIG)
    whole = fragmentation(request, Candidate("origin", "c", (0,)), f, DEFAULT_CONFIG)
    assert small < big < whole  # c: breaking a whole free node costs a further 1.0
    f.add_replica("llama-3.1-8b", "c", (0,))
    assert fragmentation(request, Candidate("origin", "c", (1,)), f, DEFAULT_CONFIG) == pytest.approx(big)
    # Best fit inside a node: the device with the least free memory that still fits.
    other = ModelSpec("qwen2.5-7b", weights_gib=14, kv_headroom_gib=4)
    f2 = fleet(node("x", gpus(2)), models=(SMALL, other))
    f2.add_replica("qwen2.5-7b", "x", (1,))
    assert place(f2, req()).chosen.candidate.devices == (1,)  # type: ignore[union-attr]
    # But never beside a replica of its own model: a second copy of the same weights adds no speed there.
    f2.add_replica("llama-3.1-8b", "x", (1,))
    f2.set_load(next(r for r in f2.replicas.values() if r.model == "llama-3.1-8b").id, active_leases=32)
    assert place(f2, req()).chosen.candidate.devices == (0,)  # type: ignore[union-attr]


def test_affinity_prefers_the_previous_replica_unless_overloaded() -> None:
    f = fleet(node("a"), node("b"))
    prev = f.add_replica("llama-3.1-8b", "a", (0,))
    other = f.add_replica("llama-3.1-8b", "b", (0,))
    f.set_load(prev.id, outstanding_tokens=8_000)  # 3.2 s of queue
    f.set_load(other.id, outstanding_tokens=2_000)
    # Loose objectives, met either way: here the prefill saved decides (with interactive defaults, the objective).
    request = req(previous_replica=prev.id, prompt_tokens=60_000, objectives=LatencyObjectives(ttft_s=60.0))
    assert affinity(request, Candidate("warm", "a", (0,), prev.id), f, DEFAULT_CONFIG) < -4
    d = place(f, request)
    assert d.chosen.candidate.replica_id == prev.id and d.decided_by == "affinity"  # type: ignore[union-attr]
    f.set_load(prev.id, outstanding_tokens=100_000)  # 40 s: overloaded
    assert affinity(request, Candidate("warm", "a", (0,), prev.id), f, DEFAULT_CONFIG) == 0
    assert place(f, request).chosen.candidate.replica_id == other.id  # type: ignore[union-attr]


def test_capacity_class_interactive_on_demand_batch_spot() -> None:
    f = fleet(node("a", capacity="spot", price=8.0), node("b", price=20.0))
    assert capacity_class(req(), Candidate("origin", "a", (0,)), f, DEFAULT_CONFIG) == 1
    assert place(f, req()).chosen.candidate.node_id == "b"  # type: ignore[union-attr]
    assert place(f, req(priority="batch")).chosen.candidate.node_id == "a"  # type: ignore[union-attr]


def test_decision_records_every_term_and_the_deciding_one() -> None:
    f = fleet(node("a"), node("b"))
    f.cache_weights("b", "llama-3.1-8b")
    d = place(f, req())
    assert d.chosen is not None and d.runner_up is not None
    assert set(d.chosen.terms) == {
        "ttft",
        "generation",
        "cost",
        "fragmentation",
        "affinity",
        "capacity_class",
        "objective",
    }
    assert d.chosen.candidate.node_id == "b" and d.decided_by == "ttft"
    assert d.chosen.total == pytest.approx(sum(d.chosen.contributions.values()))


# --- why not --------------------------------------------------------------------------------


def test_never_possible_names_the_sizes_and_the_fix() -> None:
    f = fleet(node("a"))
    d = place(f, req("llama-3.1-70b-tp1"))
    assert d.outcome == "never"
    assert d.reason == "llama-3.1-70b-tp1 needs 150 GiB; the largest GPU has 80 GiB; allow tensor_parallel ≥ 2"


def test_never_possible_without_enough_gpus_per_node() -> None:
    f = fleet(node("a", gpus(1)), node("b", gpus(1)))
    d = place(f, req("llama-3.1-70b"))
    assert d.outcome == "never" and "no node has enough GPUs" in (d.reason or "")


def test_never_for_missing_type_unknown_model_and_unlabelled_dedicated() -> None:
    f = fleet(node("a"), tenants=(Tenant("bank", "dedicated"),))
    assert "no GPU of type B200" in (place(f, req(gpu_types=frozenset({"B200"}))).reason or "")
    assert place(f, req("nope")).outcome == "never"
    assert "no node is dedicated to it by an operator" in (place(f, req(tenant="bank")).reason or "")


def test_busy_is_wait_not_never() -> None:
    f = fleet(node("a", gpus(1, "L4-24GB", 24)))
    r = f.add_replica("llama-3.1-8b", "a", (0,))
    f.set_load(r.id, active_leases=r.concurrency)
    f.add_model(ModelSpec("big-one", 15, 5))
    d = place(f, req("big-one"))
    assert d.outcome == "wait" and d.wait_reason == "no_capacity"
    d = place(f, req())
    assert d.outcome == "wait" and d.wait_reason == "busy"
    f.set_health("a", False)
    assert place(f, req()).outcome == "wait"  # an unhealthy node may come back


# --- bookings -------------------------------------------------------------------------------


def test_apply_counts_at_once_and_release_reverses() -> None:
    f = fleet(node("a", gpus(1)))
    d = place(f, req())
    booking = f.apply(d, 4000)
    assert booking.created_replica
    replica = f.replicas[booking.replica_id]
    assert replica.state == "loading" and replica.outstanding_tokens == 4000
    assert f.nodes["a"].devices[0].reserved_gib == SMALL.memory_gib
    # The next request joins the loading replica instead of loading another one.
    d2 = place(f, req())
    assert (
        d2.chosen is not None and d2.chosen.candidate.replica_id == replica.id and d2.chosen.candidate.tier == "loading"
    )
    b2 = f.apply(d2, 1000)
    assert replica.outstanding_tokens == 5000 and replica.active_leases == 2
    f.release(b2)
    f.release(booking)
    assert not f.replicas and f.nodes["a"].devices[0].reserved_gib == 0


def test_release_keeps_a_warm_replica() -> None:
    f = fleet(node("a", gpus(1)))
    booking = f.apply(place(f, req()), 4000)
    f.mark_warm(booking.replica_id)
    f.release(booking)
    assert f.replicas[booking.replica_id].active_leases == 0


def test_stale_decision_is_refused() -> None:
    f = fleet(node("a", gpus(1, "L4-24GB", 24)))
    d = place(f, req())
    f.apply(d, 10)
    with pytest.raises(StaleDecision):
        f.apply(d, 10)  # the same new-replica decision again: the device is taken now


def test_low_priority_never_scales_up() -> None:
    f = fleet(node("a"))
    d = place(f, req(priority="low_priority"))
    assert d.outcome == "wait" and d.wait_reason == "low_priority"
    r = f.add_replica("llama-3.1-8b", "a", (0,))
    assert place(f, req(priority="low_priority")).chosen.candidate.replica_id == r.id  # type: ignore[union-attr]


def test_tenant_quota_blocks_scale_up() -> None:
    f = fleet(node("a"), tenants=(Tenant("acme", gpu_quota=1),))
    f.apply(place(f, req(tenant="acme")), 10)
    f.set_load("r-1", active_leases=32)
    d = place(f, req(tenant="acme"))
    assert d.outcome == "wait" and d.wait_reason == "tenant_quota"


def test_the_fast_replica_wins_however_many_cheaper_slow_ones_sit_ahead_of_it() -> None:
    """Six idle replicas on cheap L4s and one on an H100, all with empty queues: an interactive step writing a
    long answer goes to the H100 (its answer in a quarter of the time). The cheap ones cost less per token and
    outnumber any fixed shortlist; the classes of spare.py still offer the H100's."""
    slow = [node(f"l4-{i}", gpus(1, "L4-24GB", 24, speed=0.25, prefix=f"l4-{i}"), price=0.5) for i in range(6)]
    f = fleet(*slow, node("h100", gpus(1, prefix="h100"), price=2.5))
    on_l4 = [f.add_replica("llama-3.1-8b", n.id, (0,), state="warm") for n in slow]
    fast = f.add_replica("llama-3.1-8b", "h100", (0,), state="warm")
    request = req(prompt_tokens=2_000, tokens=6_000)
    d = place(f, request)
    assert d.chosen is not None and d.chosen.candidate.replica_id == fast.id, d.chosen
    slowest = generation(request, Candidate("warm", "l4-0", (0,), on_l4[0].id), f, DEFAULT_CONFIG)
    assert slowest == pytest.approx(4 * d.chosen.terms["generation"])


def test_a_warm_replica_that_beats_every_possible_load_reads_no_free_capacity() -> None:
    """The floor of a new replica (fastest disk, fastest GPU, nothing else) is above what two warm replicas cost:
    the free-capacity index is never asked, and the decision and its runner-up are the full ranking's."""
    f = fleet(node("a"), node("b"), node("c"))
    f.cache_weights("c", "llama-3.1-8b")
    first = f.add_replica("llama-3.1-8b", "a", (0,), state="warm")
    second = f.add_replica("llama-3.1-8b", "b", (0,), state="warm")
    asked: list[object] = []
    real = f.free_index.nodes_across
    f.free_index.nodes_across = lambda *a: asked.append(a) or real(*a)  # type: ignore[method-assign]
    d = place(f, req())
    assert d.chosen is not None and {d.chosen.candidate.replica_id, d.runner_up.candidate.replica_id} == {  # type: ignore[union-attr]
        first.id,
        second.id,
    }
    assert asked == []
    f.unload(second.id)  # one replica left: a new one may be the runner-up, so the index is read
    d = place(f, req())
    assert d.chosen.candidate.replica_id == first.id and d.runner_up.candidate.replica_id is None  # type: ignore[union-attr]
    assert asked


def test_an_operator_s_placement_settings_reach_the_decision(monkeypatch: pytest.MonkeyPatch) -> None:
    """BERTH_PLACEMENT_COST_S_PER_USD set high: money outweighs speed, so even a long answer goes to the cheap GPU."""
    f = fleet(
        node("fast", gpus(1, "H100-80GB", 80, speed=1.0), price=2.99),
        node("slow", gpus(1, "L4-24GB", 24, speed=0.122), price=0.805),
    )
    long_answer = req(prompt_tokens=2_000, tokens=3_000)
    assert place(f, long_answer).chosen.candidate.node_id == "fast"  # type: ignore[union-attr]
    monkeypatch.setenv("BERTH_PLACEMENT_COST_S_PER_USD", "100000")
    monkeypatch.setenv("BERTH_PLACEMENT_SPOT_PREEMPTION_RISK", "0.3")
    settings = tuned(BerthConfig.load().placement_overrides)
    assert (settings.weights.cost, settings.spot_preemption_risk) == (100_000, 0.3)
    assert (
        settings.weights.ttft == DEFAULT_CONFIG.weights.ttft and settings.wan_gib_per_s == DEFAULT_CONFIG.wan_gib_per_s
    )
    decision = place(f, long_answer, settings)
    assert decision.chosen.candidate.node_id == "slow" and decision.decided_by == "cost"  # type: ignore[union-attr]


def test_a_placement_setting_out_of_range_or_unknown_is_refused_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BERTH_PLACEMENT_SPOT_PREEMPTION_RISK", "1.5")
    with pytest.raises(ValidationError, match="placement_spot_preemption_risk"):
        BerthConfig.load()
    with pytest.raises(ValueError, match="no setting named weights.speed"):
        tuned({"weights.speed": 2.0})
