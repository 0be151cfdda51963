"""The pool service over a real SQLite store: leases, the wait queue, and sync with node reports."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest

from orchestrator.catalogue import ModelCatalogue
from orchestrator.config import BerthConfig
from orchestrator.pool.feasibility import never_reason
from orchestrator.pool.scaler import ScaleDown, ScaleUp
from orchestrator.pool.service import GONE_CONFIRM_S, UNREPORTED_LOAD_GRACE_S, PoolService
from orchestrator.store import Reservation, Store
from sdk import ModelEntry, ScalingPolicy
from sdk.wire.fleet import NodeHeartbeat, NodeSpec
from sdk.wire.lease import LeaseRequest, NextStep, ReleaseLease

pytestmark = pytest.mark.postgresql  # the store's SQL must mean the same on SQLite and PostgreSQL

SECRET = "node-secret"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def join(
    store: Store,
    node_id: str,
    gpus: str = "H100-80GB",
    count: int = 1,
    datacenter: str = "east",
    capacity: str = "on-demand",
    cached: tuple[str, ...] = (),
    replicas: list[dict] | None = None,
    started: bool = True,
) -> None:
    """Register a node and send its first heartbeat; the replicas it lists are ones a pool started on it
    (`started`: their loads are on record) unless told otherwise."""
    memory = {"H100-80GB": 81559, "L4-24GB": 23034, "A100-40GB": 40960}[gpus]
    store.fleet.register(
        NodeSpec.model_validate(
            {
                "node_id": node_id,
                "datacenter": datacenter,
                "zone": f"{datacenter}-1",
                "capacity": capacity,
                "usd_per_hour": 3.0 * count,
                "gpus": [{"index": i, "type_name": gpus, "memory_total_mib": memory} for i in range(count)],
                "weights_cache_capacity_bytes": 500 * 2**30,
            }
        ),
        SECRET,
    )
    if started:
        record_started(store, node_id, replicas or [])
    store.fleet.heartbeat(
        NodeHeartbeat.model_validate(
            {
                "node_id": node_id,
                "cached_weights": [{"model": m, "size_bytes": 2**30} for m in cached],
                "replicas": replicas or [],
            }
        ),
        SECRET,
    )


def record_started(store: Store, node_id: str, replicas: list[dict], pool_id: str = "") -> None:
    """A pool's record of each replica's load (its GPU reservation), as the pool that started it keeps one: a
    replica a node reports is served from only with one. Ids already on record are left as they are."""
    known = {r.replica_id for r in store.reservations.list()}
    for r in replicas:
        if r["replica_id"] in known:
            continue
        model = store.models.get(r["model"])
        gib = model.entry.weights_gib + model.entry.kv_headroom_gib if model is not None else 0.0
        devices = tuple(r["gpu_indexes"])
        wanted = Reservation(r["replica_id"], node_id, r["model"], devices, gib / len(devices), None, pool_id)
        assert store.reservations.reserve(wanted, dict.fromkeys(devices, 1e6), lambda _: 0.0, UNREPORTED_LOAD_GRACE_S)


def req(task: str, step: int = 1, model: str = "llama-3.1-8b", **fields: object) -> LeaseRequest:
    return LeaseRequest(task_id=task, step=step, model=model, tokens=500, **fields)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def pool(store: Store, clock: Clock) -> PoolService:
    return PoolService(store, ModelCatalogue(BerthConfig(), store.models), sync_every_s=0.0, clock=clock)


def test_without_nodes_a_step_waits_for_capacity(pool: PoolService) -> None:
    grant = pool.acquire(req("t1"))
    assert grant.outcome == "wait" and grant.wait_reason == "no_capacity" and "no GPU node" in grant.reason


def test_hosted_models_go_direct_and_unknown_ones_never_place(pool: PoolService) -> None:
    assert pool.acquire(req("t1", model="openai/gpt-4o")).outcome == "direct"
    never = pool.acquire(req("t1", model="no-such-model"))
    assert never.outcome == "never" and "no-such-model" in never.reason


def test_a_model_no_node_could_ever_hold_fails_at_once_with_the_way_out(store: Store, pool: PoolService) -> None:
    join(store, "small", "L4-24GB", count=1)
    grant = pool.acquire(req("t1", model="llama-3.1-70b"))
    assert grant.outcome == "never"
    assert "151.5 GiB" in grant.reason and "largest GPU" in grant.reason


def test_while_a_minted_join_token_is_unused_a_model_too_big_for_the_joined_nodes_waits_for_the_rest(
    store: Store, pool: PoolService, clock: Clock
) -> None:
    """Right after `berth up` starts its nodes the small one may report first: a step for a model only the
    others can hold waits for them instead of failing, and is placed once the big node has joined."""
    join(store, "small", "L4-24GB", count=1)
    token = store.node_admission.mint("big", ttl_s=600).join_token
    waiting = pool.acquire(req("t1", model="llama-3.1-70b"))
    assert waiting.outcome == "wait" and "1 node(s) still joining" in waiting.reason
    entry = store.models.get("llama-3.1-70b").entry  # type: ignore[union-attr]
    assert never_reason(store.fleet.list(), entry, store.node_admission.joining()) is None
    assert never_reason(store.fleet.list(), entry) is not None  # what it said before
    later = datetime.now(UTC) + timedelta(seconds=601)
    assert store.node_admission.joining(now=later) == 0  # an unused token counts only until it expires

    joined = store.node_admission.join(
        NodeSpec.model_validate(
            {
                "node_id": "big",
                "datacenter": "east",
                "zone": "east-1",
                "capacity": "on-demand",
                "usd_per_hour": 6.0,
                "gpus": [{"index": i, "type_name": "H100-80GB", "memory_total_mib": 81559} for i in range(2)],
                "weights_cache_capacity_bytes": 500 * 2**30,
            }
        ),
        None,
        token,
        cluster_token=False,
    )
    store.fleet.heartbeat(NodeHeartbeat.model_validate({"node_id": "big"}), joined.node_secret)
    assert store.node_admission.joining() == 0
    pool.sync(force=True)
    placed = pool.acquire(req("t1", model="llama-3.1-70b"))
    assert placed.outcome == "placed" and placed.node_id == "big"


def test_a_cold_placement_books_a_lease_that_loads_a_replica_and_is_idempotent(store: Store, pool: PoolService) -> None:
    join(store, "gpu-a")
    grant = pool.acquire(req("t1"))
    assert grant.outcome == "placed" and grant.node_id == "gpu-a" and grant.tier == "origin"
    assert grant.load is not None and grant.load.replica_id == grant.replica_id and grant.load.gpu_indexes == [0]
    assert grant.usd_per_1m_completion == 0.30 and grant.decided_by
    assert store.leases.for_step("t1", 1).lease_id == grant.lease_id
    again = pool.acquire(req("t1"))  # a retried local activity
    assert again.lease_id == grant.lease_id and len(store.leases.list()) == 1
    # A second step joins the loading replica instead of starting another (no thundering herd).
    second = pool.acquire(req("t2"))
    assert second.replica_id == grant.replica_id and second.tier == "loading" and second.load is not None


def test_a_warm_replica_beats_a_cold_load_and_release_starts_its_idle_clock(
    store: Store, pool: PoolService, clock: Clock
) -> None:
    join(store, "gpu-a", cached=("llama-3.1-8b",))
    join(
        store,
        "gpu-b",
        replicas=[{"replica_id": "r-warm", "model": "llama-3.1-8b", "gpu_indexes": [0], "state": "warm"}],
    )
    grant = pool.acquire(req("t1"))
    assert (grant.node_id, grant.replica_id, grant.tier, grant.load) == ("gpu-b", "r-warm", "warm", None)
    assert "r-warm" not in pool.idle_since
    clock.now += 5
    pool.release(ReleaseLease(lease_id=grant.lease_id, replica_warm=True))
    pool.release(ReleaseLease(lease_id=grant.lease_id, replica_warm=True))  # idempotent
    assert store.leases.list() == [] and pool.idle_since["r-warm"] == clock.now
    assert pool.fleet.replicas["r-warm"].active_leases == 0


def test_a_steps_context_takes_it_back_to_the_replica_holding_its_prefix(store: Store, pool: PoolService) -> None:
    warm = [{"replica_id": r, "model": "llama-3.1-8b", "gpu_indexes": [0], "state": "warm"} for r in ("r-a", "r-b")]
    join(store, "gpu-a", replicas=warm[:1])
    join(store, "gpu-b", replicas=warm[1:])
    # Without a context the tie goes to the stable order; the replica that served step 1 holds 30k tokens of prefix.
    assert pool.acquire(req("t0")).replica_id == "r-a"
    grant = pool.acquire(req("t1", step=2, previous_replica="r-b", prompt_tokens=30_000))
    # Its prefix is what lets it meet the interactive objective: 30k tokens prefilled anew take ~3 s on an H100.
    assert (grant.replica_id, grant.decided_by) == ("r-b", "objective")
    assert pool.acquire(req("t2", step=2, previous_replica="r-b")).decided_by != "affinity"


def test_steps_wait_in_priority_then_age_order_and_newcomers_queue_behind(store: Store, pool: PoolService) -> None:
    store.models.put(ModelEntry(name="solo", weights_gib=10, kv_headroom_gib=2, engine_args={"max_num_seqs": 1}))
    join(store, "gpu-a", replicas=[{"replica_id": "r-1", "model": "solo", "gpu_indexes": [0], "state": "warm"}])
    first = pool.acquire(req("busy", model="solo", service_class="low_priority"))
    assert first.outcome == "placed"
    early = pool.acquire(req("early", model="solo", service_class="low_priority"))
    urgent = pool.acquire(req("urgent", model="solo", priority=5, service_class="low_priority"))
    assert early.outcome == urgent.outcome == "wait" and early.wait_reason == "low_priority"
    assert (
        urgent.queue_position == 1
        and pool.acquire(req("early", model="solo", service_class="low_priority")).queue_position == 2
    )
    pool.release(ReleaseLease(lease_id=first.lease_id))
    # The slot is free, but "early" waits behind "urgent"; a newcomer waits behind both.
    assert pool.acquire(req("early", model="solo", service_class="low_priority")).wait_reason == "queued"
    assert pool.acquire(req("new", model="solo", service_class="low_priority")).queue_position == 3
    assert pool.acquire(req("urgent", model="solo", priority=5, service_class="low_priority")).outcome == "placed"


def test_a_lost_node_takes_its_replicas_and_leases_with_it(store: Store, clock: Clock) -> None:
    # Lost after 3 s of silence: 0.5 s was not enough between join and acquire on a clean clone's make test beside
    # a benchmark and an engine build (the node was lost before the step asked, and the step was told to wait).
    pool = PoolService(
        store, ModelCatalogue(BerthConfig(), store.models), sync_every_s=0.0, node_lost_after_s=3.0, clock=clock
    )
    join(store, "gpu-a", replicas=[{"replica_id": "r-1", "model": "llama-3.1-8b", "gpu_indexes": [0], "state": "warm"}])
    grant = pool.acquire(req("t1"))
    assert grant.replica_id == "r-1"
    time.sleep(3.1)
    pool.sync(force=True)
    assert "r-1" not in pool.fleet.replicas and store.leases.list() == []
    assert pool.acquire(req("t1", step=2)).outcome == "wait"
    pool.release(ReleaseLease(lease_id=grant.lease_id))  # the step's late release changes nothing


def test_a_placed_replica_no_node_reports_is_forgotten_after_the_grace(
    store: Store, pool: PoolService, clock: Clock
) -> None:
    join(store, "gpu-a")
    grant = pool.acquire(req("t1"))
    pool.release(ReleaseLease(lease_id=grant.lease_id))
    assert grant.replica_id not in pool.fleet.replicas  # released while loading: the booking undoes it
    grant = pool.acquire(req("t2"))
    clock.now += UNREPORTED_LOAD_GRACE_S / 2
    pool.sync(force=True)
    assert grant.replica_id in pool.fleet.replicas
    clock.now += UNREPORTED_LOAD_GRACE_S
    pool.sync(force=True)
    assert grant.replica_id not in pool.fleet.replicas


def test_a_restarted_pool_counts_the_leases_still_held(store: Store, pool: PoolService, clock: Clock) -> None:
    store.models.put(ModelEntry(name="solo", weights_gib=10, kv_headroom_gib=2, engine_args={"max_num_seqs": 1}))
    join(store, "gpu-a", replicas=[{"replica_id": "r-1", "model": "solo", "gpu_indexes": [0], "state": "warm"}])
    held = pool.acquire(req("t1", model="solo", service_class="low_priority"))
    assert held.outcome == "placed"
    restarted = PoolService(store, ModelCatalogue(BerthConfig(), store.models), sync_every_s=0.0, clock=clock)
    assert restarted.acquire(req("t2", model="solo", service_class="low_priority")).outcome == "wait"
    assert restarted.acquire(req("t1", model="solo")).lease_id == held.lease_id
    restarted.release(ReleaseLease(lease_id=held.lease_id))
    assert restarted.acquire(req("t2", model="solo", service_class="low_priority")).outcome == "placed"


def test_an_idle_replica_is_planned_down_and_leaves_placement_before_its_node_stops_it(
    store: Store, pool: PoolService, clock: Clock
) -> None:
    store.models.set_policy("llama-3.1-8b", ScalingPolicy(idle_timeout_s=60))
    join(store, "gpu-a", replicas=[{"replica_id": "r-1", "model": "llama-3.1-8b", "gpu_indexes": [0], "state": "warm"}])
    grant = pool.acquire(req("t1"))
    assert [a for a in pool.plan_scaling() if isinstance(a, ScaleDown)] == []  # busy
    pool.release(ReleaseLease(lease_id=grant.lease_id))
    clock.now += 59
    assert [a for a in pool.plan_scaling() if isinstance(a, ScaleDown)] == []  # not idle long enough
    clock.now += 2
    [down] = [a for a in pool.plan_scaling() if isinstance(a, ScaleDown)]
    assert (down.replica_id, down.node_id) == ("r-1", "gpu-a")
    assert pool.begin_unload("r-1") and not pool.begin_unload("r-1")
    assert pool.acquire(req("t2")).replica_id != "r-1"  # a draining replica takes no lease


def test_min_replicas_loads_one_through_placement_and_counts_it_while_it_loads(store: Store, pool: PoolService) -> None:
    store.models.set_policy("llama-3.2-1b", ScalingPolicy(min_replicas=1))
    join(store, "gpu-a", cached=("llama-3.2-1b",))
    [up] = [a for a in pool.plan_scaling() if isinstance(a, ScaleUp) and a.model == "llama-3.2-1b"]
    order = pool.start_replica(up.model)
    assert order is not None and order.node_id == "gpu-a" and order.request.model.name == "llama-3.2-1b"
    assert pool.fleet.replicas[order.request.replica_id].state == "loading"
    assert not [a for a in pool.plan_scaling() if isinstance(a, ScaleUp) and a.model == "llama-3.2-1b"]
    grant = pool.acquire(req("t1", model="llama-3.2-1b"))
    assert grant.replica_id == order.request.replica_id and grant.load is not None  # joins the load


def test_a_replica_reported_gone_is_not_placed_on_again_even_from_a_stale_report(
    store: Store, pool: PoolService
) -> None:
    join(
        store, "gpu-a", replicas=[{"replica_id": "r-old", "model": "llama-3.1-8b", "gpu_indexes": [0], "state": "warm"}]
    )
    grant = pool.acquire(req("t1"))
    assert grant.replica_id == "r-old"
    pool.release(ReleaseLease(lease_id=grant.lease_id, replica_gone=True))
    pool.sync(force=True)  # the node's last heartbeat (before it restarted) still lists r-old
    again = pool.acquire(req("t1", step=2))
    assert again.outcome == "placed" and again.replica_id != "r-old" and again.tier == "origin"


def test_a_gpu_whose_new_replica_stopped_takes_the_next_load_at_once(store: Store, pool: PoolService) -> None:
    """A node restarted within the load's grace (a SIGTERM, a preemption) comes back without the replica it had
    just loaded: its GPU is free for the step's next load then, not once the grace has passed."""
    join(store, "small", "A100-40GB")  # one GPU: one 8B replica fits, never two
    first = pool.acquire(req("t1"))
    assert first.outcome == "placed" and first.load is not None
    listed = [{"replica_id": first.replica_id, "model": "llama-3.1-8b", "gpu_indexes": [0], "state": "warm"}]
    store.fleet.heartbeat(NodeHeartbeat.model_validate({"node_id": "small", "replicas": listed}), SECRET)
    pool.release(ReleaseLease(lease_id=first.lease_id, replica_gone=True))  # the node stopped under the step
    store.fleet.heartbeat(NodeHeartbeat.model_validate({"node_id": "small", "replicas": []}), SECRET)
    pool.sync(force=True)
    again = pool.acquire(req("t1", step=2))
    assert (again.outcome, again.node_id) == ("placed", "small"), again.reason
    assert again.replica_id != first.replica_id and again.load is not None
    # The stopped load keeps its record (a node that lists it again serves it again); it holds no memory.
    assert {first.replica_id, again.replica_id} <= {r.replica_id for r in store.reservations.list()}


def test_a_report_older_than_the_first_served_step_does_not_make_a_warm_replica_loading_again(
    store: Store, pool: PoolService
) -> None:
    join(store, "gpu-a")
    first = pool.acquire(req("t1"))
    store.fleet.heartbeat(
        NodeHeartbeat.model_validate(
            {
                "node_id": "gpu-a",
                "replicas": [
                    {"replica_id": first.replica_id, "model": "llama-3.1-8b", "gpu_indexes": [0], "state": "loading"}
                ],
            }
        ),
        SECRET,
    )
    pool.release(ReleaseLease(lease_id=first.lease_id, replica_warm=True))
    pool.sync(force=True)  # the heartbeat above was sent while the replica loaded
    second = pool.acquire(req("t1", step=2))
    assert (second.replica_id, second.tier, second.load) == (first.replica_id, "warm", None)


def test_the_scaler_adds_a_replica_even_when_an_existing_one_has_room(store: Store, pool: PoolService) -> None:
    store.models.set_policy("llama-3.2-1b", ScalingPolicy(min_replicas=2))
    join(store, "gpu-a", replicas=[{"replica_id": "r-1", "model": "llama-3.2-1b", "gpu_indexes": [0], "state": "warm"}])
    join(store, "gpu-b")
    order = pool.start_replica("llama-3.2-1b")
    assert order is not None and order.request.replica_id != "r-1"
    assert order.node_id == "gpu-b"  # spread: a node's loss never takes all of a model's replicas
    third = pool.start_replica("llama-3.2-1b")
    assert third is not None  # every node hosts one now: packing beside one is better than none


def test_a_step_whose_spot_node_was_reclaimed_avoids_that_zones_spot_nodes_while_others_can_serve(
    store: Store, pool: PoolService
) -> None:
    join(store, "spot-1", capacity="spot")
    join(store, "spot-2", capacity="spot")
    join(store, "steady", datacenter="west")
    batch = {"service_class": "batch"}
    first = pool.acquire(req("t1", **batch))
    assert (first.zone, first.capacity) == ("east-1", "spot")  # batch work prefers spot
    pool.release(ReleaseLease(lease_id=first.lease_id))

    # spot-1 was reclaimed under t2's step: spot-2 shares its zone's spot pool, so the step goes elsewhere.
    moved = pool.acquire(req("t2", exclude_nodes=["spot-1"], avoid_spot_zones=["east-1"], **batch))
    assert (moved.node_id, moved.zone, moved.capacity) == ("steady", "west-1", "on-demand")
    pool.release(ReleaseLease(lease_id=moved.lease_id))
    # ...but when only that zone's spot capacity can serve, it serves rather than nobody.
    cornered = pool.acquire(req("t3", exclude_nodes=["spot-1", "steady"], avoid_spot_zones=["east-1"], **batch))
    assert cornered.outcome == "placed" and cornered.node_id == "spot-2"


# --- max_replicas, the free-slot queue rule, confirmed replicas, exclusions (3dd1583, d213d12, d4f55b7) ---


def solo_at_max(store: Store, max_replicas: int) -> None:
    """A one-slot model whose every allowed replica already runs warm on gpu-a, with room for more:
    the H100 could hold another, so only the policy's cap keeps a step from starting one."""
    store.models.put(ModelEntry(name="solo", weights_gib=10, kv_headroom_gib=2, engine_args={"max_num_seqs": 1}))
    store.models.set_policy("solo", ScalingPolicy(max_replicas=max_replicas))
    join(
        store,
        "gpu-a",
        replicas=[
            {"replica_id": f"r-{i}", "model": "solo", "gpu_indexes": [0], "state": "warm"} for i in range(max_replicas)
        ],
    )


def wall_clock_shifted(monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    """Stamp the store's node writes `seconds` from now: heartbeat times are wall time, not the pool's clock."""
    shift = timedelta(seconds=seconds)
    monkeypatch.setattr("orchestrator.store.fleet.utcnow", lambda: datetime.now(UTC) + shift)


def test_a_step_waits_instead_of_starting_a_replica_past_max_replicas(store: Store, pool: PoolService) -> None:
    solo_at_max(store, max_replicas=2)
    served = {pool.acquire(req(task, model="solo")).replica_id for task in ("t1", "t2")}
    assert served == {"r-0", "r-1"}
    third = pool.acquire(req("t3", model="solo"))
    assert third.outcome == "wait" and third.wait_reason == "busy" and "max_replicas (2)" in third.reason
    assert set(pool.fleet.replicas_by_model["solo"]) == {"r-0", "r-1"}  # nothing started for it


def test_a_newcomer_takes_a_free_slot_while_more_are_free_than_steps_wait_ahead(
    store: Store, pool: PoolService, clock: Clock
) -> None:
    solo_at_max(store, max_replicas=2)
    held = [pool.acquire(req(task, model="solo")) for task in ("t1", "t2")]
    assert pool.acquire(req("waiter", model="solo")).outcome == "wait"
    clock.now += 1  # newcomers arrive after the waiter (at the same instant the queue orders by task id)
    for grant in held:
        pool.release(ReleaseLease(lease_id=grant.lease_id, replica_warm=True))
    # Two slots free, one step waits ahead: the newcomer takes one and leaves one for the waiter...
    assert pool.acquire(req("new-1", model="solo")).outcome == "placed"
    # ...but not the last one, which the waiter ahead of it still needs.
    late = pool.acquire(req("new-2", model="solo"))
    assert (late.outcome, late.wait_reason, late.queue_position) == ("wait", "queued", 2)
    assert pool.acquire(req("waiter", model="solo")).outcome == "placed"


def test_a_replica_reported_gone_is_served_again_once_a_heartbeat_15s_later_still_lists_it(
    store: Store, pool: PoolService, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    r_old = [{"replica_id": "r-old", "model": "llama-3.1-8b", "gpu_indexes": [0], "state": "warm"}]
    join(store, "gpu-a", replicas=r_old)
    grant = pool.acquire(req("t1"))
    assert grant.replica_id == "r-old"
    pool.release(ReleaseLease(lease_id=grant.lease_id, replica_gone=True))
    # A heartbeat right after the news may be one the node built before the replica went: still ignored.
    store.fleet.heartbeat(NodeHeartbeat.model_validate({"node_id": "gpu-a", "replicas": r_old}), SECRET)
    moved = pool.acquire(req("t1", step=2))
    assert moved.outcome == "placed" and moved.replica_id != "r-old"
    pool.release(ReleaseLease(lease_id=moved.lease_id))  # a replica still loading goes with its only lease

    clock.now += GONE_CONFIRM_S + 1
    wall_clock_shifted(monkeypatch, GONE_CONFIRM_S + 1)
    store.fleet.heartbeat(NodeHeartbeat.model_validate({"node_id": "gpu-a", "replicas": r_old}), SECRET)
    back = pool.acquire(req("t1", step=3))
    assert (back.replica_id, back.tier, back.load) == ("r-old", "warm", None)


def test_a_step_excluded_from_every_node_waits_saying_so(store: Store, pool: PoolService) -> None:
    """Exclusions are the workflow's to lift (workflows/fleet_round.py `still_excluded`): the pool honours them."""
    join(store, "gpu-a")
    join(store, "gpu-b")
    assert pool.acquire(req("t1", exclude_nodes=["gpu-a"])).node_id == "gpu-b"
    cornered = pool.acquire(req("t2", exclude_nodes=["gpu-a", "gpu-b"]))
    assert cornered.outcome == "wait" and "excluded_node" in (cornered.reason or "")


def test_tenants_admins_set_in_the_store_bound_placement(store: Store, pool: PoolService) -> None:
    from sdk.wire.identity import TenantSpec, Trust

    store.tenants.create(TenantSpec(name="acme", trust=Trust.isolated))
    store.tenants.create(TenantSpec(name="tiny", gpu_quota=1))
    join(store, "gpu-a", count=2)
    shared = pool.acquire(req("t1"))
    # An isolated tenant never joins another tenant's GPU: its replica goes on the node's other one.
    isolated = pool.acquire(req("t2", tenant="acme"))
    assert isolated.outcome == "placed" and isolated.replica_id != shared.replica_id
    assert set(isolated.gpu_indexes).isdisjoint(shared.gpu_indexes)
    # A tenant holding its quota of GPUs waits rather than starting another replica.
    first = pool.acquire(req("t3", tenant="tiny", model="llama-3.2-1b"))
    assert first.outcome == "placed"
    second = pool.acquire(req("t4", tenant="tiny", model="qwen2.5-7b"))
    assert second.outcome == "wait" and second.wait_reason == "tenant_quota", second


def test_a_step_that_announced_its_tool_calls_finds_a_replica_started_for_it_before_it_asked(
    store: Store, pool: PoolService, clock: Clock
) -> None:
    """The task's step ends in tool calls and says so on release; its replica is lost while the tools run.
    The scaler starts a replica for the announced step (a pre-warm), and the step's next ask lands on it:
    the pre-warm is marked used, and what the API shows says so."""
    join(
        store,
        "gpu-a",
        cached=("llama-3.1-8b",),
        replicas=[{"replica_id": "r-1", "model": "llama-3.1-8b", "gpu_indexes": [0], "state": "warm"}],
    )
    grant = pool.acquire(req("t1"))
    assert grant.replica_id == "r-1"
    pool.release(ReleaseLease(lease_id=grant.lease_id, replica_warm=True, next_step=NextStep(kind="tool_calls")))
    pool.release(ReleaseLease(lease_id="none", replica_gone=True))  # a late release of nothing changes nothing
    join(store, "gpu-a", cached=("llama-3.1-8b",))  # the node no longer runs r-1 (its engine died)
    pool.sync(force=True)
    assert "r-1" not in pool.fleet.replicas

    [up] = [a for a in pool.plan_scaling() if isinstance(a, ScaleUp) and a.model == "llama-3.1-8b"]
    assert up.prewarm and "intent: 1 announced step(s) (tool_calls)" in up.reason and "no replica" in up.reason
    order = pool.start_replica(up.model, up.reason)
    assert order is not None
    view = pool.foresight_views()["llama-3.1-8b"]
    assert [(p.replica_id, p.used_at) for p in view.prewarms] == [(order.request.replica_id, None)]
    assert view.announced == 1

    clock.now += 3  # the tools return
    again = pool.acquire(req("t1", step=2))
    assert again.replica_id == order.request.replica_id  # the replica started for it, before it asked
    view = pool.foresight_views()["llama-3.1-8b"]
    assert view.prewarms[0].used_at is not None and view.announced == 0
    store.models.publish_foresight({"llama-3.1-8b": view})
    shown = store.models.get("llama-3.1-8b")
    assert shown is not None and shown.foresight is not None and shown.foresight.prewarms[0].used_at is not None


def test_low_priority_steps_announce_nothing_and_an_announced_step_keeps_its_replica(
    store: Store, pool: PoolService, clock: Clock
) -> None:
    store.models.set_policy("llama-3.1-8b", ScalingPolicy(idle_timeout_s=60))
    join(store, "gpu-a", replicas=[{"replica_id": "r-1", "model": "llama-3.1-8b", "gpu_indexes": [0], "state": "warm"}])
    background = pool.acquire(req("bg", service_class="low_priority"))
    pool.release(ReleaseLease(lease_id=background.lease_id, replica_warm=True, next_step=NextStep(kind="tool_calls")))
    assert pool.foresight_views().get("llama-3.1-8b") is None or pool.foresight_views()["llama-3.1-8b"].announced == 0

    grant = pool.acquire(req("t1"))
    pool.release(ReleaseLease(lease_id=grant.lease_id, replica_warm=True, next_step=NextStep(kind="awaiting_input")))
    clock.now += 61  # past the operator's window, while the human has not answered
    assert [a for a in pool.plan_scaling() if isinstance(a, ScaleDown)] == []  # kept for the announced step
    clock.now += 600  # the announcement expired: the task is gone
    [down] = [a for a in pool.plan_scaling() if isinstance(a, ScaleDown)]
    assert down.replica_id == "r-1"


def test_a_lease_released_outside_the_pool_drops_its_load(store: Store, pool: PoolService, clock: Clock) -> None:
    """The reconciler releases the leases of a task whose workflow ended in Temporal without releasing them (issue
    34, item 7): the pool's next sync drops their load, so their replica serves others and its idle clock starts."""
    join(
        store,
        "gpu-b",
        replicas=[{"replica_id": "r-warm", "model": "llama-3.1-8b", "gpu_indexes": [0], "state": "warm"}],
    )
    ended, running = pool.acquire(req("t-ended")), pool.acquire(req("t-running"))
    assert pool.fleet.replicas["r-warm"].active_leases == 2

    assert [lease.lease_id for lease in store.leases.release_task("t-ended")] == [ended.lease_id]
    clock.now += 5
    pool.sync(force=True)

    assert pool.fleet.replicas["r-warm"].active_leases == 1 and "r-warm" not in pool.idle_since
    assert pool.acquire(req("t-ended")).lease_id != ended.lease_id  # the step asked again is placed anew
    pool.release(ReleaseLease(lease_id=running.lease_id, replica_warm=True))
    store.leases.release_task("t-ended")
    pool.sync(force=True)
    assert pool.fleet.replicas["r-warm"].active_leases == 0 and pool.idle_since["r-warm"] == clock.now
