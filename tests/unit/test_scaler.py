"""The scaler's plan: each rule on a small fleet, then its invariants over random fleets.

Invariants: a loading replica is never unloaded; no model goes below min_replicas or is
planned past max_replicas; only idle warm replicas past their timeout go; a model without a
catalogue entry never scales up; the same inputs give the same plan, in whatever order the
mappings were built.
"""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.pool import Device, FleetState, ModelSpec, Node
from orchestrator.pool.scaler import FIXED_KEEP_ALIVE_S, Foresight, ModelDemand, ScaleDown, ScaleUp, plan_scaling
from sdk.wire.catalogue import ScalingPolicy

SMALL = ModelSpec("small", 16, 4, concurrency=4)
BIG = ModelSpec("big", 140, 10, tensor_parallel=(2,), concurrency=8)
NOW = 10_000.0


def fleet(nodes: int = 2, gpus: int = 8, models: tuple[ModelSpec, ...] = (SMALL, BIG)) -> FleetState:
    f = FleetState()
    for m in models:
        f.add_model(m)
    for n in range(nodes):
        f.add_node(
            Node(
                f"n{n}",
                "dc1",
                "z1",
                "on-demand",
                20.0,
                [Device(i, f"n{n}-{i}", "H100-80GB", 80.0) for i in range(gpus)],
            )
        )
    return f


def replica(
    f: FleetState,
    model: str = "small",
    node: str = "n0",
    gpu: int | None = None,
    *,
    state: str = "warm",
    leases: int = 0,
    tokens: int = 0,
) -> str:
    devices = (gpu if gpu is not None else len(f.replicas) % 8,)
    r = f.add_replica(model, node, devices, state=state)  # type: ignore[arg-type]
    f.set_load(r.id, outstanding_tokens=tokens, active_leases=leases)
    return r.id


def ups(plan: list) -> Counter[str]:
    return Counter(p.model for p in plan if isinstance(p, ScaleUp))


def downs(plan: list) -> list[str]:
    return [p.replica_id for p in plan if isinstance(p, ScaleDown)]


def plan(f: FleetState, policies: dict | None = None, idle: dict | None = None, demand: dict | None = None) -> list:
    return plan_scaling(f, policies or {}, idle or {}, NOW, demand or {})


# --- scale up -------------------------------------------------------------------------------


def test_min_replicas_are_loaded_and_loading_ones_count() -> None:
    f = fleet()
    policy = {"small": ScalingPolicy(min_replicas=3)}
    assert ups(plan(f, policy)) == {"small": 3}
    replica(f, state="loading")
    assert ups(plan(f, policy)) == {"small": 2}
    (up,) = [p for p in plan(f, {"small": ScalingPolicy(min_replicas=2)}) if isinstance(p, ScaleUp)]
    assert "min_replicas" in up.reason


def test_waiting_acquires_scale_from_zero_one_replica_per_concurrency_slots() -> None:
    f = fleet()
    assert ups(plan(f, demand={"small": ModelDemand(waiting=1)})) == {"small": 1}
    assert ups(plan(f, demand={"small": ModelDemand(waiting=9)})) == {"small": 3}  # 4 leases a replica
    assert plan(f, demand={"small": ModelDemand(waiting=0)}) == []


def test_max_replicas_caps_every_rule_counting_loading_replicas() -> None:
    f = fleet()
    replica(f, state="loading", leases=4)
    replica(f, leases=4)
    policy = {"small": ScalingPolicy(max_replicas=3)}
    assert ups(plan(f, policy, demand={"small": ModelDemand(waiting=100)})) == {"small": 1}
    assert ups(plan(f, {"small": ScalingPolicy(max_replicas=2)}, demand={"small": ModelDemand(waiting=100)})) == {}


def test_queue_delay_adds_a_replica_only_when_every_replica_is_full_and_over_the_target() -> None:
    f = fleet()
    a = replica(f, tokens=25_000, leases=3)  # 2500 tokens/s: 10 s of queue, and a free slot of 4
    policy = {"small": ScalingPolicy(scaler="queue_delay", target=2.0)}
    assert plan(f, policy) == []  # the free slot takes the next lease into its running batch at once
    f.set_load(a, active_leases=4)
    (up,) = plan(f, policy)
    assert up == ScaleUp("small", up.reason) and "every replica" in up.reason
    replica(f, state="loading")  # a loading replica with an empty queue will take the next leases
    assert plan(f, policy) == []
    f.set_load(a, outstanding_tokens=1000)
    assert plan(f, policy) == []


def test_request_count_scales_to_bring_leases_per_replica_to_the_target() -> None:
    f = fleet()
    replica(f, leases=4)
    replica(f, leases=3)
    policy = {"small": ScalingPolicy(scaler="request_count", target=2.0)}
    assert ups(plan(f, policy)) == {"small": 2}  # 7 leases / 2 per replica → 4 replicas
    relaxed = {"small": ScalingPolicy(scaler="request_count", target=4.0)}
    assert ups(plan(f, relaxed)) == {}  # 3.5 per replica is within 4
    # Waiting acquires scale up only when no replica has a free slot (concurrency 4).
    f2 = fleet()
    replica(f2, leases=4)
    assert ups(plan(f2, relaxed, demand={"small": ModelDemand(waiting=2)})) == {"small": 1}
    f3 = fleet()
    replica(f3, leases=1)
    assert ups(plan(f3, relaxed, demand={"small": ModelDemand(waiting=2)})) == {}


def test_warm_buffer_keeps_idle_replicas_beyond_those_in_use_only_while_in_use() -> None:
    f = fleet()
    policy = {"small": ScalingPolicy(warm_buffer=2, scaler="request_count", target=10)}
    assert plan(f, policy) == []  # nobody uses it: a buffer holds no GPU
    replica(f, leases=1)
    assert ups(plan(f, policy)) == {"small": 2}
    replica(f, state="loading")  # a loading replica with no lease is buffer on its way
    assert ups(plan(f, policy)) == {"small": 1}


def test_a_model_with_no_catalogue_entry_never_scales_up() -> None:
    f = fleet()
    assert plan(f, {"ghost": ScalingPolicy(min_replicas=2)}, demand={"ghost": ModelDemand(waiting=5)}) == []


def test_draining_replicas_do_not_count() -> None:
    f = fleet()
    r = replica(f)
    f.set_replica_state(r, "draining")
    assert ups(plan(f, {"small": ScalingPolicy(min_replicas=1)})) == {"small": 1}
    assert downs(plan(f, idle={r: 0.0})) == []


# --- scale down -----------------------------------------------------------------------------


def test_idle_replicas_past_the_timeout_go_longest_idle_first_down_to_min() -> None:
    f = fleet()
    a, b, c = replica(f), replica(f), replica(f)
    policy = {"small": ScalingPolicy(min_replicas=1, idle_timeout_s=300)}
    idle = {a: NOW - 400, b: NOW - 900, c: NOW - 500}
    p = plan(f, policy, idle)
    assert downs(p) == [b, c] and all(d.node_id == "n0" and d.model == "small" for d in p)
    assert "idle 900s" in p[0].reason


def test_a_replica_idle_for_less_than_the_timeout_or_untimed_stays() -> None:
    f = fleet()
    a, b = replica(f), replica(f)
    assert downs(plan(f, {"small": ScalingPolicy(idle_timeout_s=300)}, {a: NOW - 299})) == []
    assert downs(plan(f, {"small": ScalingPolicy(idle_timeout_s=300)}, {a: NOW - 300})) == [a]
    assert b not in downs(plan(f, {"small": ScalingPolicy(idle_timeout_s=300)}, {a: NOW - 300}))


def test_loading_and_busy_replicas_are_never_unloaded() -> None:
    f = fleet()
    loading = replica(f, state="loading")
    busy = replica(f, leases=1)
    assert downs(plan(f, idle={loading: 0.0, busy: 0.0})) == []


def test_no_policy_means_defaults_scale_to_zero_after_five_minutes() -> None:
    f = fleet()
    a = replica(f)
    assert downs(plan(f, idle={a: NOW - 301})) == [a]
    assert downs(plan(f, idle={a: NOW - 200})) == []


def test_ties_in_idle_time_go_by_replica_id() -> None:
    f = fleet()
    ids = [replica(f) for _ in range(3)]
    p = plan(f, {"small": ScalingPolicy(min_replicas=1)}, {i: NOW - 1000 for i in ids})
    assert downs(p) == sorted(ids)[:2]


def test_scale_down_keeps_the_warm_buffer_and_what_the_leases_need() -> None:
    f = fleet()
    replica(f, leases=2)
    idle = [replica(f) for _ in range(3)]
    long_ago = {i: NOW - 1000 for i in idle}
    assert len(downs(plan(f, {"small": ScalingPolicy(warm_buffer=1)}, long_ago))) == 2
    # request_count at 1 lease per replica: the two leases need two replicas.
    assert len(downs(plan(f, {"small": ScalingPolicy(scaler="request_count", target=1)}, long_ago))) == 2
    assert len(downs(plan(f, {"small": ScalingPolicy(scaler="request_count", target=0.5)}, long_ago))) == 0


def test_a_model_above_a_lowered_max_sheds_idle_replicas_only() -> None:
    f = fleet()
    a, _b, _c = replica(f), replica(f, leases=1), replica(f, leases=1)
    policy = {"small": ScalingPolicy(max_replicas=1, idle_timeout_s=60)}
    assert downs(plan(f, policy, {a: NOW - 61})) == [a]


# --- properties -----------------------------------------------------------------------------

MODELS = (ModelSpec("tiny", 2, 2, concurrency=2), SMALL, ModelSpec("mid", 40, 10, tensor_parallel=(1, 2)), BIG)
UNCATALOGUED = "ghost"
NAMES = [m.name for m in MODELS] + [UNCATALOGUED]

policies_st = st.builds(
    lambda lo, extra, timeout, scaler, target, buffer: ScalingPolicy(
        min_replicas=lo,
        max_replicas=max(lo + extra, 1),
        idle_timeout_s=timeout,
        scaler=scaler,
        target=target,
        warm_buffer=buffer,
    ),
    st.integers(0, 4),
    st.integers(0, 4),
    st.sampled_from([1.0, 60.0, 300.0]),
    st.sampled_from(["queue_delay", "request_count"]),
    st.sampled_from([0.5, 1.0, 2.0, 8.0]),
    st.integers(0, 3),
)
replicas_st = st.lists(
    st.tuples(
        st.sampled_from([m.name for m in MODELS]),
        st.integers(0, 3),
        st.sampled_from(["loading", "warm", "draining"]),
        st.integers(0, 10),
        st.integers(0, 50_000),
        st.one_of(st.none(), st.floats(0, 2000)),
    ),
    max_size=16,
)


def random_fleet(replicas: list) -> tuple[FleetState, dict[str, float]]:
    f = FleetState()
    for m in MODELS:
        f.add_model(m)
    for n in range(4):
        f.add_node(
            Node(f"n{n}", "dc1", "z1", "on-demand", 20.0, [Device(i, f"n{n}-{i}", "H100-80GB", 80.0) for i in range(8)])
        )
    idle: dict[str, float] = {}
    for model, node, state, leases, tokens, idle_for in replicas:
        spec = f.models[model]
        degree = spec.tensor_parallel[0]
        n = f.nodes[f"n{node}"]
        free = [d.index for d in n.devices if d.replicas == 0]
        if len(free) < degree:
            continue
        r = f.add_replica(model, n.id, tuple(free[:degree]), state=state)
        f.set_load(r.id, outstanding_tokens=tokens, active_leases=leases)
        if idle_for is not None:
            idle[r.id] = NOW - idle_for
    return f, idle


@settings(max_examples=400, deadline=None)
@given(
    replicas=replicas_st,
    policies=st.dictionaries(st.sampled_from(NAMES), policies_st, max_size=5),
    demand=st.dictionaries(st.sampled_from(NAMES), st.builds(ModelDemand, st.integers(0, 40)), max_size=5),
    learned=st.booleans(),
    announced=st.lists(st.tuples(st.sampled_from(NAMES), st.floats(0, 120)), max_size=6),
)
def test_plan_invariants(replicas: list, policies: dict, demand: dict, learned: bool, announced: list) -> None:
    f, idle = random_fleet(replicas)

    def foresight() -> Foresight | None:
        if not learned:
            return None
        ahead = Foresight()
        for i, (model, ago) in enumerate(announced):
            ahead.intents.announce(f"t{i}", model, "tool_calls", NOW - ago)  # type: ignore[union-attr]
        return ahead

    p = plan_scaling(f, policies, idle, NOW, demand, foresight())

    up = ups(p)
    down = downs(p)
    assert len(set(down)) == len(down), "a replica is unloaded once"
    for rid in down:
        r = f.replicas[rid]
        assert r.state == "warm", "never unloads a loading (or draining) replica"
        assert r.active_leases == 0
        timeout = policies.get(r.model, ScalingPolicy()).idle_timeout_s
        if timeout is not None or not learned:
            assert rid in idle and NOW - idle[rid] >= (timeout or FIXED_KEEP_ALIVE_S)
    down_by_model = Counter(f.replicas[rid].model for rid in down)
    for model in set(NAMES):
        policy = policies.get(model, ScalingPolicy())
        live = [r for rid in f.replicas_by_model.get(model, {}) if (r := f.replicas[rid]).state != "draining"]
        if down_by_model[model]:
            assert len(live) - down_by_model[model] >= policy.min_replicas, "never below min_replicas"
            assert not up[model], "a model scales one way per tick"
        if up[model]:
            assert len(live) + up[model] <= policy.max_replicas, "never past max_replicas"
            assert model in f.models, "never scales up a model with no catalogue entry"
        assert len(live) + up[model] >= min(policy.min_replicas, policy.max_replicas) or model not in f.models

    # Deterministic: the same inputs, the mappings built in another order, give the same plan.
    again = plan_scaling(
        f,
        dict(reversed(list(policies.items()))),
        dict(reversed(list(idle.items()))),
        NOW,
        dict(reversed(list(demand.items()))),
        foresight(),
    )
    assert again == p
