"""The pool's metrics: a step that waits for capacity, then gets a cold replica once a node joins."""

from __future__ import annotations

import uuid

from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from test_pool_service import Clock, join, req

from orchestrator.catalogue import ModelCatalogue
from orchestrator.config import BerthConfig
from orchestrator.pool.service import PoolService
from orchestrator.store import Store
from sdk import ModelEntry


def points(reader: InMemoryMetricReader, model: str) -> dict[str, list]:
    """Metric name -> the data points that carry `model` (readings are cumulative over the session)."""
    found: dict[str, list] = {}
    for rm in reader.get_metrics_data().resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                found[m.name] = [p for p in m.data.data_points if p.attributes.get("model") == model]
    return found


def pool_for_a_new_model(store: Store) -> tuple[str, Clock, PoolService]:
    """A model of its own (so this test's series are its own) in the catalogue, and a pool on a test clock."""
    model = f"m-{uuid.uuid4().hex[:8]}"
    store.models.put(ModelEntry(name=model, weights_gib=10, kv_headroom_gib=2))
    clock = Clock()
    return model, clock, PoolService(store, ModelCatalogue(BerthConfig(), store.models), sync_every_s=0.0, clock=clock)


def test_a_waiting_step_then_a_cold_start_show_in_the_pool_metrics(
    store: Store, metrics_reader: InMemoryMetricReader
) -> None:
    model, clock, pool = pool_for_a_new_model(store)

    assert pool.acquire(req("t1", model=model)).wait_reason == "no_capacity"
    waiting = points(metrics_reader, model)
    [answer] = waiting["berth_gpu_wait_answers"]
    assert answer.value == 1 and answer.attributes["reason"] == "no_capacity"
    [depth] = waiting["berth_gpu_queue_depth"]
    assert depth.value == 1
    clock.now += 4.0
    [longest] = points(metrics_reader, model)["berth_gpu_queue_longest_wait_seconds"]
    assert longest.value == 4.0

    join(store, "gpu-a")
    clock.now += 3.5
    grant = pool.acquire(req("t1", model=model))
    assert grant.outcome == "placed" and grant.tier == "origin"
    placed = points(metrics_reader, model)
    assert {p.attributes["outcome"]: p.count for p in placed["berth_placement_decision_seconds"]} == {
        "wait": 1,
        "placed": 1,
    }
    [waited] = placed["berth_gpu_wait_seconds"]
    assert waited.count == 1 and waited.sum == 7.5
    [cold] = placed["berth_cold_starts"]
    assert cold.value == 1 and cold.attributes["tier"] == "origin"
    # No one waits: the model's series stay, at 0 (a gauge that vanished would read as "no data").
    assert [p.value for p in placed["berth_gpu_queue_depth"]] == [0]
    assert [p.value for p in placed["berth_gpu_queue_longest_wait_seconds"]] == [0.0]


def test_each_judged_grant_counts_and_the_attainment_gauges_read_the_pools_traffic_book(
    store: Store, metrics_reader: InMemoryMetricReader
) -> None:
    model, clock, pool = pool_for_a_new_model(store)
    join(store, "gpu-a", count=2, replicas=[{"replica_id": "r-w", "model": model, "gpu_indexes": [0], "state": "warm"}])

    assert pool.acquire(req("t1", model=model)).replica_id == "r-w"  # warm: predicted within objectives
    assert pool.acquire(req("t2", model=model, service_class="batch")).outcome == "placed"  # no per-call objectives
    book = pool.foresight.traffic.attainment(model, clock.now)
    assert (book.calls, book.met) == (1, 1)

    shown = points(metrics_reader, model)
    [judged] = shown["berth_slo_grants"]
    assert judged.value == 1 and dict(judged.attributes) == {
        "model": model,
        "service_class": "interactive",
        "met": "true",
    }
    [share] = shown["berth_slo_attainment_ratio"]
    [target] = shown["berth_slo_attainment_target_ratio"]
    assert share.value == book.share == 1.0 and share.attributes["service_class"] == "interactive"
    assert target.value == pool.foresight.traffic.target(model, clock.now) == 0.99

    clock.now += pool.foresight.traffic.attainment_window_s + 1  # the window has passed: no series
    assert points(metrics_reader, model).get("berth_slo_attainment_ratio", []) == []
