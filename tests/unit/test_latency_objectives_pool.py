"""The pool by latency objectives: what a candidate is predicted to give a call, where new replicas go, when a
step waits for a full replica instead of a load, and when the scaler adds or keeps capacity. Each case is one
cause the Azure code trace exposed (docs/simulation.md, "The pool on real traffic")."""

from __future__ import annotations

import math

import pytest

from orchestrator.pool.admission import defers_to_a_busy_replica, place_scaler_replica
from orchestrator.pool.decision import Candidate, PlacementRequest
from orchestrator.pool.fleet import Device, FleetState, ModelSpec, Node
from orchestrator.pool.placement import place
from orchestrator.pool.scaler import MIN_ATTAINMENT_SAMPLES, Foresight, ModelDemand, ScaleUp, plan_scaling
from orchestrator.pool.scorers import objective
from orchestrator.pool.serving_speed import UNFIT, judge, predict, sequence_rate
from orchestrator.pool.traffic import MAX_SAMPLES, UNSEEN_PROMPT_TOKENS, TrafficBook
from orchestrator.pool.weights import DEFAULT_CONFIG
from orchestrator.simulator.engine import Simulation
from orchestrator.simulator.fleet_file import parse_fleet
from orchestrator.simulator.plan import CallPlan, SessionPlan, Workload
from orchestrator.simulator.policies import berth_policy
from orchestrator.simulator.report import summarize
from orchestrator.simulator.scenarios import catalogue_models
from sdk.wire.objectives import DEFAULT_OBJECTIVES, LatencyObjectives, resolve

QWEN = ModelSpec("qwen2.5-7b", weights_gib=14.2, kv_headroom_gib=8.0, tensor_parallel=(1, 2), tokens_per_s=2640.8)


def node(node_id: str, type_name: str, memory: float, speed: float, price: float, count: int = 2) -> Node:
    devices = [Device(i, f"{node_id}-{i}", type_name, memory, speed) for i in range(count)]
    return Node(node_id, "dc1", "z1", "on-demand", price, devices)


def h100_and_l40s() -> FleetState:
    fleet = FleetState()
    fleet.add_node(node("h100", "H100-80GB", 80, 1.0, 2.99 * 2))
    fleet.add_node(node("l40s", "L40S-48GB", 48, 0.366, 1.861 * 2))
    fleet.add_model(QWEN)
    return fleet


def test_objectives_resolve_field_by_field_from_the_class_defaults_to_the_task() -> None:
    tenant = LatencyObjectives(ttft_s=2.0)
    task = LatencyObjectives(tpot_s=0.1)
    got = resolve("interactive", tenant, None, task)
    assert (got.ttft_s, got.tpot_s, got.attainment) == (2.0, 0.1, DEFAULT_OBJECTIVES["interactive"].attainment)
    assert not resolve("batch").per_call and resolve("batch").deadline_s == 3600.0
    with pytest.raises(ValueError, match="ttft_s"):
        LatencyObjectives(ttft_s=0)
    with pytest.raises(ValueError, match="attainment"):
        LatencyObjectives.model_validate({"attainment": True})  # a boolean is no share


def test_a_new_replica_goes_where_the_models_long_prompts_meet_the_objective_not_where_short_ones_do() -> None:
    """A short prompt meets 1 s on either GPU; the model's recent p95 prompt (6,500 tokens) takes 1.7 s to prefill
    on an L40S and 0.6 s on an H100. The L40S strands less memory, which decided before objectives."""
    fleet = h100_and_l40s()
    short = PlacementRequest(model=QWEN.name, tokens=600, prompt_tokens=500)
    assert place(fleet, short).chosen.candidate.node_id == "l40s"  # type: ignore[union-attr]
    judged_by_traffic = PlacementRequest(model=QWEN.name, tokens=600, prompt_tokens=500, traffic_prompt_tokens=6_500)
    decision = place(fleet, judged_by_traffic)
    assert decision.chosen is not None and decision.chosen.candidate.node_id == "h100"
    # Both miss this call's 1 s (a load from the origin comes first); only the L40S is unfit for the traffic.
    misses = {
        n: objective(judged_by_traffic, Candidate("origin", n, (0,)), fleet, DEFAULT_CONFIG) for n in ("h100", "l40s")
    }
    assert misses == {"h100": 1.0, "l40s": 1.0 + UNFIT}


def test_a_gpu_shared_with_another_replica_is_predicted_slower_for_a_new_one() -> None:
    fleet = h100_and_l40s()
    request = PlacementRequest(model=QWEN.name, tokens=600, prompt_tokens=500)
    alone = predict(request, Candidate("origin", "h100", (0,)), fleet, DEFAULT_CONFIG)
    fleet.add_replica(QWEN.name, "h100", (0,))
    shared = predict(request, Candidate("origin", "h100", (0,)), fleet, DEFAULT_CONFIG)
    assert shared.tpot_s == pytest.approx(2 * alone.tpot_s) and shared.ttft_s == pytest.approx(2 * alone.ttft_s)
    # A second replica of the same model beside the first takes the other GPU, not a half of the first.
    fleet.set_load(next(iter(fleet.replicas)), active_leases=QWEN.concurrency)
    decision = place(
        fleet, PlacementRequest(model=QWEN.name, tokens=600, prompt_tokens=500, traffic_prompt_tokens=6_500)
    )
    assert decision.chosen is not None and decision.chosen.candidate.devices == (1,)


def test_decode_slows_as_the_batch_grows() -> None:
    lone, full = sequence_rate(2500, 32, 1, 4.0), sequence_rate(2500, 32, 32, 4.0)
    assert lone == pytest.approx(4 * full) and full == pytest.approx(2500 / 32)
    assert lone > sequence_rate(2500, 32, 8, 4.0) > full


def test_a_step_waits_for_a_full_replica_that_frees_sooner_than_a_new_load() -> None:
    fleet = h100_and_l40s()
    replica = fleet.add_replica(QWEN.name, "h100", (0,), state="loading", load_s=50.0)
    fleet.set_load(replica.id, active_leases=QWEN.concurrency, outstanding_tokens=64_000)
    decision = place(fleet, PlacementRequest(model=QWEN.name, tokens=600, prompt_tokens=500))
    assert decision.chosen is not None and decision.chosen.candidate.replica_id is None
    # The new replica's load (from the origin) is no shorter than the loading one's whole load: wait for it.
    assert decision.chosen.terms["ttft"] >= 50.0
    assert defers_to_a_busy_replica(fleet, decision)
    fleet.set_replica_state(replica.id, "warm")  # warm and full: a slot frees within its drain over its slots
    assert defers_to_a_busy_replica(fleet, place(fleet, PlacementRequest(model=QWEN.name, tokens=600)))
    # A step that must avoid that replica's node does not wait for it.
    away = PlacementRequest(model=QWEN.name, tokens=600, exclude_nodes=frozenset({"h100"}))
    assert not defers_to_a_busy_replica(fleet, place(fleet, away))


def _foresight_with(grants: list[tuple[bool, bool]], now: float) -> Foresight:
    foresight = Foresight()
    for met, fixable in grants:
        foresight.traffic.granted(QWEN.name, now, met, fixable, 0.99)
    return foresight


def test_the_scaler_adds_a_replica_when_attainment_falls_below_target_for_want_of_capacity() -> None:
    fleet = h100_and_l40s()
    warm = fleet.add_replica(QWEN.name, "h100", (0,))
    fleet.set_load(warm.id, active_leases=4)
    now = 100.0
    late = _foresight_with([(True, False)] * 30 + [(False, True)] * 2, now)
    plan = plan_scaling(fleet, {}, {warm.id: now}, now, {}, late)
    assert [type(a) for a in plan] == [ScaleUp] and "attainment" in plan[0].reason
    # Misses the call's own prefill causes are no reason for capacity.
    own = _foresight_with([(True, False)] * 30 + [(False, False)] * 2, now)
    assert plan_scaling(fleet, {}, {warm.id: now}, now, {}, own) == []
    # Too few grants to judge.
    few = _foresight_with([(False, True)] * (MIN_ATTAINMENT_SAMPLES - 1), now)
    assert plan_scaling(fleet, {}, {warm.id: now}, now, {}, few) == []


def test_an_idle_replica_is_kept_while_the_model_misses_its_target() -> None:
    fleet = h100_and_l40s()
    busy, idle = fleet.add_replica(QWEN.name, "h100", (0,)), fleet.add_replica(QWEN.name, "h100", (1,))
    fleet.set_load(busy.id, active_leases=4)
    fleet.add_replica(QWEN.name, "l40s", (0,), state="loading", load_s=30.0)  # capacity already on its way
    now = 10_000.0
    missing = _foresight_with([(True, False)] * 30 + [(False, True)] * 5, now)
    assert plan_scaling(fleet, {}, {idle.id: 0.0}, now, {}, missing) == []  # neither more (one loads) nor less
    holding = _foresight_with([(True, False)] * 40, now)
    assert [a.replica_id for a in plan_scaling(fleet, {}, {idle.id: 0.0}, now, {}, holding)] == [idle.id]  # type: ignore[union-attr]


def test_waiting_steps_a_load_in_flight_will_serve_start_no_second_load() -> None:
    fleet = h100_and_l40s()
    loading = fleet.add_replica(QWEN.name, "h100", (0,), state="loading", load_s=40.0)
    fleet.set_load(loading.id, active_leases=QWEN.concurrency)
    foresight = Foresight()
    assert plan_scaling(fleet, {}, {}, 5.0, {QWEN.name: ModelDemand(waiting=10)}, foresight) == []
    # Without a load in flight, steps whose turnover over the slots outlasts a load do start one.
    fleet.set_replica_state(loading.id, "warm")
    for _ in range(10):
        foresight.traffic.held(QWEN.name, 5.0, 60.0)
    plan = plan_scaling(fleet, {}, {}, 5.0, {QWEN.name: ModelDemand(waiting=40)}, foresight)
    assert plan and all(isinstance(a, ScaleUp) for a in plan)


def test_the_scalers_replica_for_interactive_traffic_goes_where_it_meets_the_objective() -> None:
    fleet = h100_and_l40s()
    assert place_scaler_replica(fleet, QWEN.name, DEFAULT_CONFIG).chosen.candidate.node_id == "l40s"  # type: ignore[union-attr]
    chosen = place_scaler_replica(fleet, QWEN.name, DEFAULT_CONFIG, interactive_prompt_tokens=6_500).chosen
    assert chosen is not None and chosen.candidate.node_id == "h100"


def test_a_grant_after_a_slot_wait_is_judged_late_and_fixable_and_a_load_is_not() -> None:
    fleet = h100_and_l40s()
    fleet.add_replica(QWEN.name, "h100", (0,))
    request = PlacementRequest(model=QWEN.name, tokens=600, prompt_tokens=500)
    decision = place(fleet, request)
    on_time = judge(decision, fleet, DEFAULT_CONFIG, 0.0)
    late = judge(decision, fleet, DEFAULT_CONFIG, 2.0)
    assert on_time is not None and on_time.met
    assert late is not None and not late.met and late.fixable
    cold = judge(
        place(fleet, PlacementRequest(model=QWEN.name, tokens=600, new_replica_only=True)), fleet, DEFAULT_CONFIG, 0.0
    )
    assert cold is not None and not cold.met and not cold.fixable
    assert (
        judge(place(fleet, PlacementRequest(model=QWEN.name, tokens=600, priority="batch")), fleet, DEFAULT_CONFIG, 0.0)
        is None
    )


def test_the_traffic_book_keeps_a_bounded_window() -> None:
    book = TrafficBook(window_s=100.0)
    for i in range(5000):
        book.asked("m", float(i) / 100, i % 100)
    kept = sorted(i % 100 for i in range(5000 - MAX_SAMPLES, 5000))  # the last MAX_SAMPLES asks only
    assert book.prompt_tokens("m", 50.0) == kept[math.ceil(0.95 * len(kept)) - 1]
    assert book.prompt_tokens("m", 1_000.0) == UNSEEN_PROMPT_TOKENS  # all older than the window
    assert book.mean_hold_s("m", 0.0) is None


def test_a_burst_at_a_models_first_load_waits_for_it_on_the_fast_gpu() -> None:
    """The code trace's opening, in small: 40 calls in the 50 s of the first load from the origin. They wait for
    that one replica, on the H100, and no second load starts beside it; all but the load's wait meet 1 s."""
    fleet = parse_fleet(
        [
            {"node_id": "fast", "datacenter": "east", "zone": "e1", "gpus": "2xH100-80GB"},
            {"node_id": "cheap", "datacenter": "east", "zone": "e1", "gpus": "2xL40S-48GB"},
        ]
    )
    sessions = tuple(
        SessionPlan(f"s{i}", i * 1.25, (CallPlan("qwen2.5-7b", 500 + (i * 977) % 7000, 20, not_before_s=i * 1.25),))
        for i in range(40)
    ) + tuple(
        SessionPlan(
            f"t{i}", 100 + i * 2.0, (CallPlan("qwen2.5-7b", 500 + (i * 977) % 7000, 20, not_before_s=100 + i * 2.0),)
        )
        for i in range(100)
    )
    result = Simulation(
        fleet, catalogue_models(), Workload(sessions, 400.0), berth_policy(fleet.placement_config())
    ).run()
    assert [(r.node_id, r.tier) for r in result.replicas] == [("fast", "origin")]
    report = summarize(result)
    late = [c for c in result.calls if c.ttft_s is not None and c.ttft_s > 1.0]
    assert all(c.issued_s < result.replicas[0].ready_s for c in late)  # type: ignore[operator]
    assert report.slo_attainment is not None and report.slo_attainment >= 100 / 140


def test_a_replica_is_predicted_slower_while_a_neighbour_on_its_gpu_generates_and_ranks_by_it() -> None:
    fleet = h100_and_l40s()
    other = ModelSpec("other-7b", weights_gib=14.0, kv_headroom_gib=4.0, tokens_per_s=2640.8)
    fleet.add_model(other)
    mine = fleet.add_replica(QWEN.name, "h100", (0,))
    neighbour = fleet.add_replica(other.name, "h100", (0,))
    apart = fleet.add_replica(QWEN.name, "h100", (1,))
    request = PlacementRequest(model=QWEN.name, tokens=600, prompt_tokens=6_000)
    alone = predict(request, Candidate("warm", "h100", (0,), mine.id), fleet, DEFAULT_CONFIG)
    fleet.set_load(neighbour.id, active_leases=1)  # the neighbour starts generating
    shared = predict(request, Candidate("warm", "h100", (0,), mine.id), fleet, DEFAULT_CONFIG)
    assert (fleet.sharing(mine), fleet.sharing(apart)) == (2, 1)
    assert shared.ttft_s == pytest.approx(2 * alone.ttft_s) and shared.tpot_s == pytest.approx(2 * alone.tpot_s)
    assert place(fleet, request).chosen.candidate.replica_id == apart.id  # type: ignore[union-attr]
    fleet.set_load(neighbour.id, active_leases=0)
    assert fleet.sharing(mine) == 1
    fleet.unload(neighbour.id)
    assert place(fleet, request).chosen.candidate.replica_id == mine.id  # type: ignore[union-attr]  # stable order


def test_attainment_is_judged_afresh_once_a_models_warm_replicas_change() -> None:
    book = TrafficBook()
    book.serving("m", frozenset({"r1"}), 0.0)
    for t in range(30):
        book.granted("m", float(t), t % 2 == 0, True, 0.99)
    assert book.attainment("m", 30.0).calls == 30
    book.serving("m", frozenset({"r1"}), 31.0)  # the same replicas: nothing to forget
    assert book.attainment("m", 31.0).calls == 30
    book.serving("m", frozenset({"r1", "r2"}), 32.0)  # a replica came up: the misses before it asked for it
    assert book.attainment("m", 32.0).calls == 0


def test_hardware_is_unfit_only_for_the_part_of_the_objectives_the_fleet_can_meet() -> None:
    """A 30k-token prompt takes 3 s to prefill even on an H100 alone, past the 1 s objective: the L40S is still
    unfit for the 10k of it an H100 can prefill in time, and a GPU shared with another model likewise."""
    fleet = h100_and_l40s()
    long_traffic = PlacementRequest(model=QWEN.name, tokens=600, prompt_tokens=500, traffic_prompt_tokens=30_000)
    assert objective(long_traffic, Candidate("origin", "l40s", (0,)), fleet, DEFAULT_CONFIG) == 1.0 + UNFIT
    assert objective(long_traffic, Candidate("origin", "h100", (0,)), fleet, DEFAULT_CONFIG) == 1.0
    fleet.add_model(ModelSpec("other-7b", weights_gib=14.0, kv_headroom_gib=4.0))
    fleet.add_replica("other-7b", "h100", (0,))
    assert objective(long_traffic, Candidate("origin", "h100", (0,)), fleet, DEFAULT_CONFIG) == 1.0 + UNFIT
    # A model whose full batch is slower than 50 ms a token on every GPU is judged by its prompts alone.
    slow = ModelSpec("slow-70b", weights_gib=30.0, kv_headroom_gib=4.0, tokens_per_s=285.0)
    fleet.add_model(slow)
    short = PlacementRequest(model=slow.name, tokens=600, prompt_tokens=200, traffic_prompt_tokens=200)
    assert objective(short, Candidate("origin", "h100", (1,)), fleet, DEFAULT_CONFIG) == 1.0
