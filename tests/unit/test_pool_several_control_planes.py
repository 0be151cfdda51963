"""Pools of several control-plane replicas on one database: a GPU is never booked twice, each pool counts
the others' leases as load, and one scaler leads at a time. On SQLite and on PostgreSQL."""

from __future__ import annotations

import threading
from collections import defaultdict
from datetime import timedelta

import pytest

from orchestrator.catalogue import ModelCatalogue
from orchestrator.config import BerthConfig
from orchestrator.pool.service import PoolService
from orchestrator.store import Store
from orchestrator.store.tables import utcnow
from sdk.wire.lease import ReleaseLease
from tests.unit.test_pool_service import Clock, join, req

pytestmark = pytest.mark.postgresql


def make_pool(store: Store, name: str, clock: Clock | None = None, sync_every_s: float = 0.0) -> PoolService:
    return PoolService(
        store,
        ModelCatalogue(BerthConfig(), store.models),
        sync_every_s=sync_every_s,
        clock=clock or Clock(),
        pool_id=name,
    )


def test_a_pool_with_a_stale_view_is_refused_the_gpu_another_pool_just_took(store: Store) -> None:
    join(store, "small", "A100-40GB")  # one GPU: one 8B replica (23 GiB) fits, never two
    a, b = make_pool(store, "cp-a"), make_pool(store, "cp-b", sync_every_s=1e9)
    b.sync(force=True)  # b's view: the GPU is free
    first = a.acquire(req("t-a"))
    assert first.outcome == "placed" and first.load is not None

    second = b.acquire(req("t-b"))  # b places on its stale view; the store refuses the GPU
    assert second.outcome == "wait"
    [held] = store.reservations.list()
    assert (held.replica_id, held.pool_id) == (first.replica_id, "cp-a")
    # Having looked again, b sees the GPU taken; it leases a's replica once the node reports it.
    assert b.acquire(req("t-b")).outcome == "wait"
    join(
        store,
        "small",
        "A100-40GB",
        replicas=[{"replica_id": first.replica_id, "model": "llama-3.1-8b", "gpu_indexes": [0], "state": "loading"}],
    )
    b.sync(force=True)  # its next refresh (every second)
    joined = b.acquire(req("t-b"))
    assert joined.outcome == "placed" and joined.replica_id == first.replica_id and joined.tier == "loading"
    assert len(store.reservations.list()) == 1


def test_each_pool_counts_the_other_pools_leases_as_load(store: Store) -> None:
    join(
        store,
        "gpu-a",
        replicas=[{"replica_id": "r-warm", "model": "llama-3.1-8b", "gpu_indexes": [0], "state": "warm"}],
    )
    a, b = make_pool(store, "cp-a"), make_pool(store, "cp-b")
    grant = a.acquire(req("t-a"))
    assert grant.replica_id == "r-warm"
    b.sync(force=True)
    replica = b.fleet.replicas["r-warm"]
    assert (replica.active_leases, replica.outstanding_tokens) == (1, 500)
    assert "r-warm" not in b.idle_since  # so b's scaler would never unload it under a's step
    a.release(ReleaseLease(lease_id=grant.lease_id, replica_warm=True))
    b.sync(force=True)
    assert (replica.active_leases, replica.outstanding_tokens) == (0, 0) and "r-warm" in b.idle_since


def test_one_replica_leads_the_scaler_until_its_term_runs_out(store: Store) -> None:
    now = utcnow()
    assert store.leadership.hold("scaler", "cp-a", 10, now)
    assert not store.leadership.hold("scaler", "cp-b", 10, now + timedelta(seconds=5))
    assert store.leadership.hold("scaler", "cp-a", 10, now + timedelta(seconds=8))  # renewed
    assert store.leadership.leader("scaler", now + timedelta(seconds=9)) == "cp-a"
    later = now + timedelta(seconds=19)  # cp-a went silent at +8 s: its term ended at +18 s
    assert store.leadership.hold("scaler", "cp-b", 10, later)
    assert not store.leadership.hold("scaler", "cp-a", 10, later)


def test_pools_acquiring_at_once_never_put_more_on_a_gpu_than_it_holds(store: Store) -> None:
    for name in ("n1", "n2"):
        join(store, name, "A100-40GB", count=2)  # four 40 GiB GPUs: never two 8B or 7B replicas (22-23 GiB)
    pools = [make_pool(store, f"cp-{i}") for i in range(4)]
    errors: list[BaseException] = []

    def work(pool: PoolService, index: int) -> None:
        try:
            for n in range(12):
                model = ("llama-3.1-8b", "qwen2.5-7b")[(index + n) % 2]
                grant = pool.acquire(req(f"{pool.pool_id}-{n}", model=model))
                if grant.outcome == "placed" and n % 3 == 0:
                    pool.release(ReleaseLease(lease_id=grant.lease_id))
        except BaseException as exc:  # noqa: BLE001 (asserted below)
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(p, i)) for i, p in enumerate(pools)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    per_gpu: dict[tuple[str, int], float] = defaultdict(float)
    for r in store.reservations.list():
        for i in r.gpu_indexes:
            per_gpu[(r.node_id, i)] += r.per_device_gib
    assert per_gpu and max(per_gpu.values()) <= 40 + 1e-6
    # Every lease is on a replica some pool reserved.
    reserved = {r.replica_id for r in store.reservations.list()}
    assert {lease.replica_id for lease in store.leases.list()} <= reserved


def test_a_step_leased_again_by_another_pool_leaves_no_lease_of_the_dead_one(store: Store) -> None:
    """A pool killed after it recorded a step's lease but before the workflow saw the grant: the step's
    acquire runs again on another pool, whose lease replaces the dead one's row (one per task and step), so
    the step's release leaves nothing behind."""
    join(
        store,
        "gpu-a",
        replicas=[{"replica_id": "r-warm", "model": "llama-3.1-8b", "gpu_indexes": [0], "state": "warm"}],
    )
    a, b = make_pool(store, "cp-a"), make_pool(store, "cp-b")
    lost = a.acquire(req("t-a"))  # a dies here: its grant never reaches the workflow
    again = b.acquire(req("t-a"))
    assert again.outcome == "placed" and again.lease_id != lost.lease_id
    assert [(r.lease_id, r.pool_id) for r in store.leases.list()] == [(again.lease_id, "cp-b")]
    b.release(ReleaseLease(lease_id=again.lease_id, replica_warm=True))
    assert store.leases.list() == []


def test_of_replicas_releasing_one_lease_or_reaping_one_node_at_once_exactly_one_acts(store: Store) -> None:
    join(
        store,
        "gpu-a",
        replicas=[{"replica_id": "r-warm", "model": "llama-3.1-8b", "gpu_indexes": [0], "state": "warm"}],
    )
    grant = make_pool(store, "cp-a").acquire(req("t-a"))
    later = utcnow() + timedelta(minutes=5)  # gpu-a has been silent for minutes by then
    released: list[object] = []
    reaped: list[list[str]] = []

    def both() -> None:
        released.append(store.leases.release(grant.lease_id))
        reaped.append(store.fleet.mark_lost_after(60, now=later))

    threads = [threading.Thread(target=both) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(r is not None for r in released) == 1
    assert sorted(node for ids in reaped for node in ids) == ["gpu-a"]
