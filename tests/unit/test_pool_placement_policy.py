"""The live pool under `placement_policy="k8s-spread"` runs the simulator's Kubernetes baseline: a Service that
only routes to ready replicas, an HPA that alone adds them, whole GPUs on the least allocated node."""

from __future__ import annotations

import pytest

from orchestrator.catalogue import ModelCatalogue
from orchestrator.config import BerthConfig
from orchestrator.pool.scaler import ScaleUp
from orchestrator.pool.service import PoolService
from orchestrator.store import Store
from tests.unit.test_pool_service import Clock, join, req

pytestmark = pytest.mark.postgresql

MODEL = "llama-3.1-8b"


@pytest.fixture
def spread(store: Store) -> PoolService:
    catalogue = ModelCatalogue(BerthConfig(), store.models)
    return PoolService(store, catalogue, sync_every_s=0.0, clock=Clock(), placement_policy="k8s-spread")


def warm(replica_id: str, state: str = "warm") -> dict:
    return {"replica_id": replica_id, "model": MODEL, "gpu_indexes": [0], "state": state}


def test_a_step_goes_only_to_a_ready_replica_least_busy_first(store: Store, spread: PoolService) -> None:
    join(store, "gpu-a", replicas=[warm("r-1")])
    join(store, "gpu-b", replicas=[warm("r-2")])
    join(store, "gpu-c", replicas=[warm("r-0", state="loading")])
    placed = [spread.acquire(req(f"t{i}")) for i in range(3)]
    assert [g.replica_id for g in placed] == ["r-1", "r-2", "r-1"]  # a loading replica is not ready
    assert {g.tier for g in placed} == {"warm"} and {g.decided_by for g in placed} == {"service"}


def test_acquire_never_starts_a_replica_where_berth_would(store: Store, spread: PoolService) -> None:
    join(store, "gpu-a", cached=(MODEL,))
    berth = PoolService(store, ModelCatalogue(BerthConfig(), store.models), sync_every_s=0.0, clock=Clock())
    assert berth.acquire(req("t-berth")).outcome == "placed"  # Berth loads one for the step
    waiting = spread.acquire(req("t1"))
    assert waiting.outcome == "wait" and waiting.wait_reason == "busy"
    assert not [r for r in spread.fleet.replicas.values() if r.id not in berth.fleet.replicas]
    assert store.leases.for_step("t1", 1) is None


def test_the_hpa_alone_adds_a_replica_of_a_model_in_use_on_whole_gpus_of_the_least_allocated_node(
    store: Store, spread: PoolService
) -> None:
    join(store, "gpu-a", cached=(MODEL,))  # Berth would load here, from its disk
    other = {"replica_id": "r-1b", "model": "llama-3.2-1b", "gpu_indexes": [0], "state": "warm"}
    join(store, "gpu-big", count=4, replicas=[other])
    assert not [a for a in spread.plan_scaling() if isinstance(a, ScaleUp) and a.model == MODEL]  # nobody asked
    assert spread.acquire(req("t1")).outcome == "wait"
    ups = [a for a in spread.plan_scaling() if isinstance(a, ScaleUp)]
    assert [a.model for a in ups] == [MODEL]  # the 1B already runs, at its minReplicas; no other model is deployed
    order = spread.start_replica(MODEL)
    assert order is not None
    # gpu-big keeps 2 of 4 GPUs free after it, gpu-a none: the least allocated node, from the origin.
    assert (order.node_id, order.request.gpu_indexes, order.request.tier) == ("gpu-big", [1], "origin")


def test_an_unknown_placement_policy_is_refused_naming_the_setting(store: Store) -> None:
    with pytest.raises(ValueError, match="placement_policy: unknown policy 'bin-pack'"):
        PoolService(store, ModelCatalogue(BerthConfig(), store.models), placement_policy="bin-pack")
