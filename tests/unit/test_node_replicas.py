"""The node's replica manager: real simulated replicas load, serve, are reported and stop; the cache follows.

Replicas are real child processes (the simulated engine) on free loopback ports; a replica
that dies while loading is a real executable that prints an error and exits.
"""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

import httpx
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from temporalio.testing import ActivityEnvironment

from orchestrator.catalogue import SEED_MODELS
from orchestrator.engines.replicas import SimulatedReplicaEngine, VllmReplicaEngine
from orchestrator.node.activities import NodeActivities
from orchestrator.node.replicas import ReplicaLoadError, ReplicaManager
from orchestrator.node.weights_cache import WeightsCache
from sdk import ModelEntry
from sdk.wire.node_io import LoadReplica

SMALL = next(m for m in SEED_MODELS if m.name == "llama-3.2-1b")
GIB = 2**30


@pytest.fixture
def cache(tmp_path: Path) -> WeightsCache:
    return WeightsCache(tmp_path / "cache", 20 * GIB)


@pytest.fixture
async def manager(cache: WeightsCache, tmp_path: Path):
    engine = SimulatedReplicaEngine(load_time_scale=0.001, latency_scale=0, log_dir=tmp_path / "logs")
    m = ReplicaManager(cache, {"simulated": engine}, gpu_indexes={0, 1})
    yield m
    await m.stop_all(grace_s=2)  # never leave a child behind


async def test_a_replica_loads_serves_is_reported_and_unloads_keeping_its_weights(
    manager: ReplicaManager, cache: WeightsCache
) -> None:
    seen: list[str] = []
    replica = await manager.load(SMALL, (0,), "r1", "origin", on_progress=lambda r: seen.append(r.state))
    assert replica.state == "warm" and replica.tier == "origin" and replica.load_seconds > 0
    assert set(seen) <= {"loading"}
    assert [(r.model, r.gpu_indexes, r.state) for r in manager.reports()] == [("llama-3.2-1b", [0], "warm")]
    assert replica.handle is not None
    async with httpx.AsyncClient(timeout=30) as http:
        answer = await http.post(
            f"{replica.handle.base_url}/chat/completions",
            json={"model": "llama-3.2-1b", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5},
        )
    assert answer.status_code == 200 and answer.json()["choices"][0]["message"]["content"]
    [cached] = cache.contents()
    assert cached.model == "llama-3.2-1b" and cached.pinned

    assert await manager.unload("r1", grace_s=2)
    assert manager.reports() == [] and replica.handle.process is not None and replica.handle.process.poll() is not None
    [cached] = cache.contents()
    assert not cached.pinned  # on disk still, evictable again
    assert not await manager.unload("r1")  # a retried unload is done already


async def test_a_load_activity_writes_where_the_weights_came_from_and_its_seconds_on_its_span(
    manager: ReplicaManager,
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    load = NodeActivities(manager).load_replica
    # The span the worker's TracingInterceptor opens around the activity, stood in for here.
    with provider.get_tracer("test").start_as_current_span("RunActivity:berth.load_replica"):
        ready = await ActivityEnvironment().run(load, LoadReplica(model=SMALL, gpu_indexes=[1], replica_id="r7"))
    [span] = exporter.get_finished_spans()
    assert {k: span.attributes[k] for k in ("berth.model", "berth.replica", "berth.tier")} == {
        "berth.model": "llama-3.2-1b",
        "berth.replica": "r7",
        "berth.tier": "origin",
    }
    assert tuple(span.attributes["berth.gpu_indexes"]) == (1,)
    assert span.attributes["berth.load_s"] == ready.load_seconds > 0


async def test_a_second_load_of_cached_weights_is_a_disk_load(manager: ReplicaManager) -> None:
    await manager.load(SMALL, (0,), "r1", "origin")
    await manager.unload("r1", grace_s=2)
    again = await manager.load(SMALL, (1,), "r2", "origin")
    assert again.tier == "disk"


async def test_a_retried_load_returns_the_same_replica(manager: ReplicaManager) -> None:
    first, second = await asyncio.gather(manager.load(SMALL, (0,), "r1"), manager.load(SMALL, (0,), "r1"))
    assert first is second and len(manager.replicas()) == 1
    with pytest.raises(ReplicaLoadError, match="already runs"):
        await manager.load(SMALL, (1,), "r1")


async def test_a_replica_that_dies_while_loading_fails_with_its_log_tail(cache: WeightsCache, tmp_path: Path) -> None:
    crashing = tmp_path / "vllm"
    crashing.write_text("#!/bin/sh\necho 'torch.OutOfMemoryError: CUDA out of memory'\nexit 1\n")
    crashing.chmod(0o755)
    manager = ReplicaManager(cache, {"vllm": VllmReplicaEngine(executable=str(crashing), log_dir=tmp_path)})
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "config.json").write_bytes(b"{}")
    weights = {
        "origin": (tmp_path / "w").as_uri(),
        "files": [{"path": "config.json", "sha256": hashlib.sha256(b"{}").hexdigest(), "size_bytes": 2}],
    }
    entry = ModelEntry.model_validate({**SMALL.model_dump(), "engine": "vllm", "weights": weights})
    with pytest.raises(ReplicaLoadError, match="died while loading(.|\n)*CUDA out of memory"):
        await manager.load(entry, (0,), "r1")
    assert manager.replicas() == []
    [kept] = cache.contents()  # the verified copy stays on disk for the next try, evictable
    assert kept.model == "llama-3.2-1b" and not kept.pinned and kept.size_bytes == 2
    assert cache.free_bytes() == cache.capacity_bytes - 2  # the room reserved for the fetch is given back


@pytest.mark.parametrize(
    "change, gpus, reason",
    [
        ({"engine": "openai-compatible"}, (0,), "no 'openai-compatible' engine.*--external-url"),
        ({"engine": "vllm"}, (0,), "no 'vllm' engine"),
        ({}, (7,), "gpu_indexes: this node has no GPU 7"),
        ({}, (0, 1), r"gpu_indexes: llama-3.2-1b runs on \[1\] GPU"),
    ],
)
async def test_loads_the_node_cannot_serve_are_refused_by_name(
    manager: ReplicaManager, change: dict, gpus: tuple[int, ...], reason: str
) -> None:
    entry = ModelEntry.model_validate({**SMALL.model_dump(), **change})
    with pytest.raises(ReplicaLoadError, match=reason):
        await manager.load(entry, gpus, "r1")
    assert manager.replicas() == []


async def test_prewarm_puts_weights_on_disk_only(manager: ReplicaManager, cache: WeightsCache) -> None:
    assert await manager.prewarm(SMALL, source="datacenter") == "datacenter"
    assert await manager.prewarm(SMALL) == "disk"
    assert [w.model for w in cache.contents()] == ["llama-3.2-1b"] and manager.replicas() == []


async def test_prewarm_reports_progress_while_the_weights_arrive(cache: WeightsCache) -> None:
    manager = ReplicaManager(cache, {}, fetch_delay_s=lambda tier, size: 0.3 if tier == "origin" else 0.0)
    beats: list[int] = []
    assert await manager.prewarm(SMALL, on_progress=lambda: beats.append(1)) == "origin"
    assert beats and cache.has("llama-3.2-1b")


async def test_unloading_a_loading_replica_fails_its_load_and_frees_its_room(
    cache: WeightsCache, tmp_path: Path
) -> None:
    slow = SimulatedReplicaEngine(load_time_scale=1.0, latency_scale=0, log_dir=tmp_path)  # ~30 s from origin
    manager = ReplicaManager(cache, {"simulated": slow})
    loading = asyncio.create_task(manager.load(SMALL, (0,), "r1"))
    while not manager.replicas() or manager.replicas()[0].handle is None:
        await asyncio.sleep(0.05)
    assert [r.state for r in manager.reports()] == ["loading"]
    assert await manager.unload("r1", grace_s=2)
    with pytest.raises(ReplicaLoadError, match="r1"):
        await loading
    assert manager.replicas() == [] and cache.contents() == [] and cache.free_bytes() == cache.capacity_bytes


async def test_a_load_records_its_time_by_the_tier_its_weights_came_from(
    manager: ReplicaManager, metrics_reader
) -> None:
    def loads() -> dict[str, tuple[int, float]]:
        data = metrics_reader.get_metrics_data()  # None before anything was recorded
        return {
            p.attributes["tier"]: (p.count, p.sum)
            for rm in (data.resource_metrics if data else [])
            for sm in rm.scope_metrics
            for m in sm.metrics
            if m.name == "berth_replica_load_seconds"
            for p in m.data.data_points
            if p.attributes["model"] == SMALL.name
        }

    before = loads().get("origin", (0, 0.0))
    replica = await manager.load(SMALL, (0,), "r1", "origin")
    count, total = loads()["origin"]
    assert count == before[0] + 1 and total - before[1] == pytest.approx(replica.load_seconds)
