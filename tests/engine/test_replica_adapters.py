"""Engine adapters: how a node starts, checks and stops one model replica.

Simulated replicas are real child processes on free loopback ports; the only timing checks
are generous timeouts and the lower bound the load delay guarantees. vLLM is not installed
here, so its adapter is checked through the command and environment it builds.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import httpx
import pytest

from orchestrator.engines.replicas import (
    ExternalReplicaEngine,
    ReplicaEngine,
    ReplicaHandle,
    ReplicaSpec,
    ReplicaStartError,
    SimulatedReplicaEngine,
    VllmReplicaEngine,
    planned_load_delay_s,
    processes,
    replica_spec,
)
from orchestrator.engines.replicas.simulated import (
    DATACENTER_BYTES_PER_S,
    DISK_BYTES_PER_S,
    ENGINE_START_S,
    ORIGIN_BYTES_PER_S,
    simulated_model_arg,
)
from orchestrator.engines.simulated import EngineThread
from orchestrator.node.weights_cache import LoadPlan
from sdk import ModelEntry

GB = 10**9
START_TIMEOUT_S = 90.0  # a child imports FastAPI and litellm before it answers: seconds, more on a busy CI box


async def wait_for(check: Callable[[], Awaitable[bool]], timeout_s: float = START_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not true within {timeout_s}s")
        await asyncio.sleep(0.1)


def spec(**overrides: object) -> ReplicaSpec:
    fields: dict[str, object] = {
        "replica_id": "r1",
        "model": "llama-3.1-8b",
        "gpu_indexes": (0,),
        "weights_bytes": 16 * GB,
        "load_tier": "disk",
    }
    fields.update(overrides)
    return ReplicaSpec(**fields)  # type: ignore[arg-type]


@pytest.fixture
def engine(tmp_path: Path) -> SimulatedReplicaEngine:
    return SimulatedReplicaEngine(load_time_scale=0.01, latency_scale=0, log_dir=tmp_path)


@pytest.fixture
def stop_after() -> Iterator[list[ReplicaHandle]]:
    handles: list[ReplicaHandle] = []
    yield handles
    for handle in handles:  # never leave a child behind, whatever the test did
        if handle.process is not None and handle.process.poll() is None:
            os.killpg(handle.process.pid, signal.SIGKILL)
            handle.process.wait()


# --- the simulated replica: a real process that loads, serves and stops --------------------------


async def test_simulated_replica_is_alive_but_not_ready_while_loading_then_serves(
    tmp_path: Path, stop_after: list[ReplicaHandle]
) -> None:
    # 26 GB (a 13B model, not one of the simulator's defaults) from disk: 13 s + 10 s engine start,
    # scaled by 0.15 → ~3.5 s of loading, long enough to look at it while it loads.
    engine = SimulatedReplicaEngine(load_time_scale=0.15, latency_scale=0, log_dir=tmp_path)
    replica = spec(model="team-model-13b", weights_bytes=26 * GB, gpu_indexes=(1,))
    started = time.monotonic()
    handle = await engine.start(replica)
    stop_after.append(handle)
    assert isinstance(engine, ReplicaEngine)
    assert handle.load_delay_s == pytest.approx((26 * GB / DISK_BYTES_PER_S + ENGINE_START_S) * 0.15)
    assert engine.base_url(handle) == f"http://127.0.0.1:{handle.port}/v1"

    assert await engine.alive(handle)
    assert not await engine.ready(handle)
    await wait_for(lambda: _logged(handle, "loading weights"))
    assert await engine.alive(handle) and not await engine.ready(handle)  # loading: alive, not ready

    await wait_for(lambda: engine.ready(handle))
    assert time.monotonic() - started >= handle.load_delay_s  # readiness waited out the load for real
    async with httpx.AsyncClient(base_url=engine.base_url(handle), timeout=30) as client:
        models = (await client.get("/models")).json()
        assert [m["id"] for m in models["data"]] == ["team-model-13b"]
        reply = await client.post(
            "/chat/completions",
            json={"model": "team-model-13b", "max_tokens": 16, "messages": [{"role": "user", "content": "hello"}]},
        )
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert body["choices"][0]["message"]["role"] == "assistant"
    assert body["usage"]["completion_tokens"] > 0

    await engine.stop(handle, grace_s=10)
    assert not await engine.alive(handle)
    assert not await engine.ready(handle)
    assert handle.process is not None and handle.process.returncode is not None


async def test_stop_during_the_load_ends_the_process(
    engine: SimulatedReplicaEngine, stop_after: list[ReplicaHandle]
) -> None:
    slow = SimulatedReplicaEngine(load_time_scale=10, latency_scale=0, log_dir=engine.log_dir)  # ~3 min load
    handle = await slow.start(spec())
    stop_after.append(handle)
    await wait_for(lambda: _logged(handle, "loading weights"))
    await slow.stop(handle, grace_s=10)
    assert not await slow.alive(handle)
    assert handle.process is not None and handle.process.returncode == -signal.SIGTERM


async def test_a_replica_whose_process_dies_is_not_alive(
    engine: SimulatedReplicaEngine, stop_after: list[ReplicaHandle]
) -> None:
    handle = await engine.start(spec())
    stop_after.append(handle)
    assert await engine.alive(handle)
    assert handle.pid is not None
    os.kill(handle.pid, signal.SIGKILL)
    await wait_for(lambda: _not(engine.alive(handle)), timeout_s=30)
    assert not await engine.ready(handle)
    await engine.stop(handle, grace_s=1)  # stopping a dead replica is harmless


async def test_a_replica_on_a_port_in_use_dies_at_once_and_says_why(
    engine: SimulatedReplicaEngine, stop_after: list[ReplicaHandle]
) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        slow = SimulatedReplicaEngine(load_time_scale=10, latency_scale=0, log_dir=engine.log_dir)
        handle = await slow.start(spec(port=port))  # the port is bound before the long load, so this fails now
        stop_after.append(handle)
        await wait_for(lambda: _not(slow.alive(handle)), timeout_s=60)
    assert "in use" in processes.log_tail(handle.log_path)


async def test_stop_kills_a_process_that_ignores_sigterm_after_the_grace(tmp_path: Path) -> None:
    log = tmp_path / "stubborn.log"
    stubborn = (
        "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('ignoring SIGTERM', flush=True); time.sleep(120)"
    )
    process = processes.launch([sys.executable, "-c", stubborn], dict(os.environ), log)
    try:
        deadline = time.monotonic() + 30
        while "ignoring" not in log.read_text():
            assert time.monotonic() < deadline and process.poll() is None
            await asyncio.sleep(0.05)
        code = await processes.terminate(process, grace_s=0.5)
        assert code == -signal.SIGKILL
        assert not processes.running(process)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


async def test_cuda_visible_devices_follow_the_gpu_indexes_and_win_over_env_additions() -> None:
    env = processes.replica_env((2, 3), {"CUDA_VISIBLE_DEVICES": "0", "HF_HOME": "/cache"}, base={"PATH": "/bin"})
    assert env == {"PATH": "/bin", "CUDA_VISIBLE_DEVICES": "2,3", "HF_HOME": "/cache"}


# --- the load delay: derived from weights size and tier ------------------------------------------


def test_load_delay_grows_with_the_tier_the_weights_come_from() -> None:
    size = 16 * GB
    delays = [
        planned_load_delay_s(
            spec(weights_bytes=size, load_tier=tier, bytes_to_fetch=size if tier in ("datacenter", "origin") else 0)
        )
        for tier in ("warm", "disk", "datacenter", "origin")
    ]
    assert delays == sorted(delays) and len(set(delays)) == 4
    warm, disk, datacenter, origin = delays
    assert warm == ENGINE_START_S
    assert disk == pytest.approx(16 / 6 + ENGINE_START_S)  # 16 GB at 6 GB/s
    assert datacenter == pytest.approx(16e9 / (2.5 * 2**30) + ENGINE_START_S)  # 16 GB at 2.5 GiB/s
    assert origin == pytest.approx(16e9 / (0.5 * 2**30) + ENGINE_START_S)  # 16 GB at 0.5 GiB/s
    assert (DISK_BYTES_PER_S, DATACENTER_BYTES_PER_S, ORIGIN_BYTES_PER_S) == (6e9, 2.5 * 2**30, 0.5 * 2**30)


def test_load_delay_scales_and_reads_unfetched_bytes_from_disk() -> None:
    partial = spec(weights_bytes=16 * GB, load_tier="datacenter", bytes_to_fetch=4 * GB)
    assert planned_load_delay_s(partial) == pytest.approx(4e9 / DATACENTER_BYTES_PER_S + 12 / 6 + ENGINE_START_S)
    assert planned_load_delay_s(partial, 0.01) == pytest.approx(planned_load_delay_s(partial) * 0.01)
    assert planned_load_delay_s(partial, 0) == 0
    with pytest.raises(ValueError, match="load_time_scale"):
        planned_load_delay_s(partial, -1)


def test_simulated_model_timings_come_from_args_defaults_or_size() -> None:
    assert simulated_model_arg(spec()) == "llama-3.1-8b"
    assert simulated_model_arg(spec(engine_args={"tokens_per_s": 50})) == "llama-3.1-8b:0.15:50.0:131072"
    # 16 GB of weights decode at 1.9e12 B/s / 16e9 B ≈ 119 tokens/s, like the default 8B model.
    name, ttft, tps = simulated_model_arg(spec(model="custom-8b")).split(":")
    assert name == "custom-8b" and float(ttft) == pytest.approx(0.15) and float(tps) == pytest.approx(118.75)
    with pytest.raises(ReplicaStartError, match="weights_bytes"):
        simulated_model_arg(spec(model="custom", weights_bytes=0))
    with pytest.raises(ReplicaStartError, match="':'"):
        simulated_model_arg(spec(model="qwen2.5:7b"))


def test_a_spec_from_the_catalogue_and_the_weights_cache_plan() -> None:
    entry = ModelEntry(
        name="llama-3.1-70b",
        weights_gib=131.0,
        tensor_parallel=[2, 4],
        engine="vllm",
        engine_args={"max_model_len": 8192},
    )
    built = replica_spec(
        entry, "r7", (2, 3), LoadPlan("llama-3.1-70b", "datacenter", 131 * 2**30, []), env={"HF_HOME": "/hf"}
    )
    assert built == ReplicaSpec(
        replica_id="r7",
        model="llama-3.1-70b",
        gpu_indexes=(2, 3),
        tensor_parallel=2,
        weights_bytes=131 * 2**30,
        load_tier="datacenter",
        bytes_to_fetch=131 * 2**30,
        engine_args={"max_model_len": 8192},
        env={"HF_HOME": "/hf"},
    )


@pytest.mark.parametrize(
    "overrides, field",
    [
        ({"tensor_parallel": 2}, "gpu_indexes"),
        ({"gpu_indexes": (1, 1), "tensor_parallel": 2}, "gpu_indexes"),
        ({"load_tier": "cloud"}, "load_tier"),
        ({"bytes_to_fetch": 17 * GB}, "bytes_to_fetch"),
        ({"load_tier": "disk", "bytes_to_fetch": GB}, "bytes_to_fetch"),
        ({"port": 70000}, "port"),
        ({"replica_id": ""}, "replica_id"),
    ],
)
def test_a_bad_spec_names_the_field(overrides: dict[str, object], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        spec(**overrides)


# --- vLLM: the command and environment it builds --------------------------------------------------


def test_vllm_command_line_and_environment(tmp_path: Path) -> None:
    engine = VllmReplicaEngine(log_dir=tmp_path)
    cached = "/var/lib/berth/node/cache/revisions/" + "ab" * 32
    replica = spec(
        model="llama-3.1-70b",
        gpu_indexes=(4, 5, 6, 7),
        tensor_parallel=4,
        weights_bytes=140 * GB,
        weights_path=cached,
        engine_args={"max_model_len": 32768, "enforce-eager": True, "enable_prefix_caching": False},
        env={"HF_HOME": "/models/hf"},
    )
    assert engine.command(replica, 8123) == [
        "vllm",
        "serve",
        cached,
        "--host",
        "127.0.0.1",
        "--port",
        "8123",
        "--served-model-name",
        "llama-3.1-70b",
        "--tensor-parallel-size",
        "4",
        "--gpu-memory-utilization",
        "0.9",
        "--max-model-len",
        "32768",
        "--enforce-eager",
        "--no-enable-prefix-caching",
    ]
    env = engine.environment(replica)
    assert env["CUDA_VISIBLE_DEVICES"] == "4,5,6,7" and env["HF_HOME"] == "/models/hf"
    assert env["HF_HUB_OFFLINE"] == "1" and env["TRANSFORMERS_OFFLINE"] == "1"  # it never downloads on its own
    small = spec(weights_path=cached, engine_args={"gpu_memory_utilization": 0.5})
    assert engine.command(small, 1)[2] == cached
    assert engine.command(small, 1)[-2:] == ["--gpu-memory-utilization", "0.5"]
    with pytest.raises(ReplicaStartError, match="port"):
        engine.command(spec(weights_path=cached, engine_args={"port": 9000}), 1)


def test_vllm_never_starts_on_a_hub_id(tmp_path: Path) -> None:
    engine = VllmReplicaEngine(log_dir=tmp_path)
    with pytest.raises(ReplicaStartError, match="weights_path: vLLM starts on the node's cached copy of llama-3.1-8b"):
        engine.command(spec(), 1)
    with pytest.raises(ReplicaStartError, match="'meta-llama/Llama-3.1-8B' is not a local path"):
        engine.command(spec(engine_args={"model": "meta-llama/Llama-3.1-8B"}), 1)
    assert engine.command(spec(engine_args={"model": "/models/llama-3.1-8b"}), 1)[2] == "/models/llama-3.1-8b"
    with pytest.raises(ReplicaStartError, match="model comes from the node's weights cache"):
        engine.command(spec(weights_path="/cache/x", engine_args={"model": "/models/other"}), 1)


async def test_starting_vllm_without_the_executable_names_it(tmp_path: Path) -> None:
    engine = VllmReplicaEngine(log_dir=tmp_path)
    with pytest.raises(ReplicaStartError, match="'vllm' not found"):
        await engine.start(spec(weights_path="/cache/x", env={"PATH": str(tmp_path)}))  # a PATH with nothing on it
    with pytest.raises(ReplicaStartError, match="vllm-nightly"):
        await VllmReplicaEngine(executable="vllm-nightly", log_dir=tmp_path).start(spec(weights_path="/cache/x"))


# --- SGLang: the command and environment it builds -------------------------------------------------


def test_sglang_command_line_and_environment(tmp_path: Path) -> None:
    from orchestrator.engines.replicas.sglang import SglangReplicaEngine

    engine = SglangReplicaEngine(log_dir=tmp_path)
    cached = "/var/lib/berth/node/cache/revisions/" + "cd" * 32
    replica = spec(
        model="qwen2.5-7b",
        gpu_indexes=(2, 3),
        tensor_parallel=2,
        weights_path=cached,
        engine_args={"context_length": 32768, "mem_fraction_static": 0.85, "disable_radix_cache": True},
    )
    assert engine.command(replica, 30000) == [
        "python3",
        "-m",
        "sglang.launch_server",
        "--model-path",
        cached,
        "--served-model-name",
        "qwen2.5-7b",
        "--tp",
        "2",
        "--host",
        "127.0.0.1",
        "--port",
        "30000",
        "--context-length",
        "32768",
        "--mem-fraction-static",
        "0.85",
        "--disable-radix-cache",
    ]
    env = engine.environment(replica)
    assert env["CUDA_VISIBLE_DEVICES"] == "2,3" and env["HF_HUB_OFFLINE"] == "1"
    with pytest.raises(ReplicaStartError, match="weights_path: SGLang starts on the node's cached copy"):
        engine.command(spec(), 1)
    with pytest.raises(ReplicaStartError, match="tp come from the replica spec"):
        engine.command(spec(weights_path=cached, engine_args={"tp": 4}), 1)
    with pytest.raises(ReplicaStartError, match="enable-torch-compile is false.*no --no- form"):
        engine.command(spec(weights_path=cached, engine_args={"enable_torch_compile": False}), 1)


async def test_starting_sglang_without_its_python_names_it(tmp_path: Path) -> None:
    from orchestrator.engines.replicas.sglang import SglangReplicaEngine

    with pytest.raises(ReplicaStartError, match="'python-sglang' not found"):
        await SglangReplicaEngine(python="python-sglang", log_dir=tmp_path).start(spec(weights_path="/cache/x"))


# --- an external server Berth does not run --------------------------------------------------------


async def test_external_replica_is_ready_when_the_server_lists_the_model() -> None:
    with EngineThread(latency_scale=0) as server:
        engine = ExternalReplicaEngine(server.base_url.removesuffix("/v1"))
        assert isinstance(engine, ReplicaEngine)
        handle = await engine.start(spec())
        assert engine.base_url(handle) == server.base_url
        assert handle.process is None
        assert await engine.ready(handle) and await engine.alive(handle)
        other = await engine.start(spec(model="not-served-here"))
        assert not await engine.ready(other) and await engine.alive(other)
        await engine.stop(handle, grace_s=0)  # a no-op: the server is not ours
        assert await engine.ready(handle)
    assert not await engine.ready(handle)
    assert not await engine.alive(handle)
    with pytest.raises(ValueError, match="url"):
        ExternalReplicaEngine("localhost:8000")


async def _not(check: Awaitable[bool]) -> bool:
    return not await check


async def _logged(handle: ReplicaHandle, text: str) -> bool:
    return text in processes.log_tail(handle.log_path, max_bytes=100_000)
