"""/healthz and /readyz beside /metrics on the port of a process with no HTTP API: the node agent and the worker.

The node agent joins and heartbeats against the real API app in-process (httpx's ASGI transport, a real SQLite
store; Temporal at a closed port, which fleet routes never reach), and its probes are read over real HTTP from
the agent's own probe server. The worker runs in-process against the session's Temporal dev server, on a task
queue of its own so that it takes no other test's work.
"""

from __future__ import annotations

import asyncio
import socket
import uuid
from pathlib import Path

import httpx
import pytest
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from temporalio.testing import WorkflowEnvironment

from orchestrator.api import TemporalGateway
from orchestrator.config import BerthConfig
from orchestrator.engines.replicas import SimulatedReplicaEngine
from orchestrator.node import SimulatedDiscovery, WeightsCache, parse_simulate
from orchestrator.node.agent import READY_WITHIN_BEATS, NodeAgent, NodeOptions
from orchestrator.node.control_plane import ControlPlane
from orchestrator.node.replicas import ReplicaManager
from orchestrator.server import create_app
from orchestrator.store import Store
from orchestrator.telemetry.probe_server import ProbeServer
from orchestrator.worker import WORKER_METRICS_PORT_ENV, run_worker

JOIN_TOKEN = "join-me-probes"


PROBE_WAIT_S = 60.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def probe(port: int, path: str) -> httpx.Response:
    async with httpx.AsyncClient(timeout=5) as http:
        return await http.get(f"http://127.0.0.1:{port}{path}")


def test_the_probe_server_answers_each_check_with_its_reason() -> None:
    broken = {"reason": "the disk is full"}

    def crashing() -> str | None:
        raise RuntimeError("boom")

    # A busy machine answers late, not wrongly: the wait is generous (httpx's 5 s default failed beside CPU hogs).
    http = httpx.Client(timeout=PROBE_WAIT_S)
    server = ProbeServer(0, live=lambda: None, ready=lambda: broken["reason"], host="127.0.0.1")
    try:
        url = f"http://127.0.0.1:{server.port}"
        assert http.get(f"{url}/healthz").json() == {"status": "ok"}
        not_ready = http.get(f"{url}/readyz")
        assert not_ready.status_code == 503 and not_ready.json() == {
            "status": "not ready",
            "reason": "the disk is full",
        }
        broken["reason"] = None
        assert http.get(f"{url}/readyz").json() == {"status": "ready"}
        metrics = http.get(f"{url}/metrics")
        assert metrics.status_code == 200 and "# TYPE" in metrics.text
    finally:
        server.close()
    bare = ProbeServer(
        0, live=crashing, host="127.0.0.1"
    )  # no readiness check: /readyz is not there; a check that raises is a 503
    try:
        assert http.get(f"http://127.0.0.1:{bare.port}/readyz").status_code == 404
        sick = http.get(f"http://127.0.0.1:{bare.port}/healthz")
        assert sick.status_code == 503 and "RuntimeError: boom" in sick.json()["reason"]
    finally:
        bare.close()
        http.close()


@pytest.fixture
def app(tmp_path: Path):
    config = BerthConfig(data_dir=tmp_path, database_url=f"sqlite:///{tmp_path}/berth.db", join_token=JOIN_TOKEN)
    store = Store.open(config.resolved_database_url)
    yield create_app(config, store, TemporalGateway(f"127.0.0.1:{free_port()}"))
    store.close()


def node_agent(app, tmp_path: Path, port: int) -> NodeAgent:
    node_id = f"gpu-{uuid.uuid4().hex[:6]}"
    token = app.state.services.store.node_admission.mint(node_id, 600).join_token  # admitted: no approval to wait for
    options = NodeOptions(
        node_id=node_id, join_token=token, cache_dir=tmp_path / "node", zone="z1", heartbeat_s=5.0, metrics_port=port
    )
    discovery = SimulatedDiscovery(parse_simulate("1xH100-80GB"), options.node_id)
    engine = SimulatedReplicaEngine(load_time_scale=0.001, latency_scale=0, log_dir=tmp_path / "logs")
    replicas = ReplicaManager(WeightsCache(options.cache_dir / "cache", 10 * 2**30), {"simulated": engine})
    return NodeAgent(options, discovery, ControlPlane("http://berth", transport=httpx.ASGITransport(app)), replicas)


async def test_a_node_is_ready_once_joined_and_while_its_heartbeats_get_through(
    app, tmp_path: Path, metrics_reader: InMemoryMetricReader
) -> None:  # metrics_reader: a MeterProvider
    port = free_port()
    agent = node_agent(app, tmp_path, port)
    agent.start_probes()  # as `berth node` does, before it joins

    async def ready() -> tuple[int, str]:
        answer = await probe(port, "/readyz")
        return answer.status_code, answer.json().get("reason", "")

    assert (await probe(port, "/healthz")).status_code == 200
    assert await ready() == (503, "not registered with the control plane at http://berth yet")
    await agent.join()
    assert await ready() == (503, "registered; no heartbeat has got through yet")
    await agent.heartbeat()
    assert (await probe(port, "/readyz")).json() == {"status": "ready"}
    assert "berth_gpu_memory_total_bytes" in (await probe(port, "/metrics")).text

    # Beats that stop getting through: silent for longer than READY_WITHIN_BEATS periods...
    agent._beat_ok_at -= READY_WITHIN_BEATS * agent.options.heartbeat_s + 1
    status, reason = await ready()
    assert status == 503 and reason.startswith("no heartbeat has got through for")
    await agent.heartbeat()
    assert (await ready())[0] == 200
    # ...or one that fails outright, with the failure as the reason; the process itself stays live.
    healthy_plane = agent.control_plane
    agent.control_plane = ControlPlane(f"http://127.0.0.1:{free_port()}", timeout_s=2)
    try:
        with pytest.raises(httpx.ConnectError):
            await agent.heartbeat()
        status, reason = await ready()
        assert status == 503 and reason.startswith("the last heartbeat failed:"), reason
        assert (await probe(port, "/healthz")).status_code == 200
    finally:
        await agent.control_plane.close()
        agent.control_plane = healthy_plane
    await agent.heartbeat()
    assert (await ready())[0] == 200
    agent.stopping.set()
    assert await ready() == (503, "the node is leaving the fleet")


async def test_the_worker_is_live_while_it_polls(
    tmp_path: Path, temporal_env: WorkflowEnvironment, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = free_port()
    monkeypatch.setenv(WORKER_METRICS_PORT_ENV, str(port))
    config = BerthConfig(
        data_dir=tmp_path,
        database_url=f"sqlite:///{tmp_path}/berth.db",
        fleet=False,
        temporal_address=f"127.0.0.1:{free_port()}",
    )  # no Temporal here: it keeps trying
    starting = asyncio.create_task(run_worker(config, task_queue=f"probes-{uuid.uuid4()}"))
    try:
        answer = await wait_for_answer(port)
        assert answer.status_code == 503 and answer.json()["reason"].startswith("starting"), answer.text
    finally:
        starting.cancel()
        await starting
    with pytest.raises(httpx.ConnectError):  # the worker's port closes with it
        await probe(port, "/healthz")

    target = temporal_env.client.service_client.config.target_host
    queue = f"probes-{uuid.uuid4()}"
    running = asyncio.create_task(run_worker(config.model_copy(update={"temporal_address": target}), task_queue=queue))
    try:
        for _ in range(100):
            answer = await wait_for_answer(port)
            if answer.status_code == 200:
                break
            await asyncio.sleep(0.1)
        assert answer.json() == {"status": "ok"}, answer.text
        assert (await probe(port, "/metrics")).status_code == 200
    finally:
        running.cancel()
        await running


async def wait_for_answer(port: int, timeout_s: float = 20.0) -> httpx.Response:
    """The first answer of the port's /healthz (the server starts a moment after the process does). A connect
    that times out counts as no answer yet: the worker under test shares this event loop, and its start-up
    (opening and migrating the store) holds the loop for seconds on a loaded 2-core machine."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        try:
            return await probe(port, "/healthz")
        except (httpx.ConnectError, httpx.ConnectTimeout):
            if loop.time() > deadline:
                raise
            await asyncio.sleep(0.05)
