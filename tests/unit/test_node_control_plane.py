"""The node agent's control-plane client and its join/heartbeat logic, against the real API app in-process.

The app runs over httpx's ASGI transport on a real SQLite store; its Temporal gateway points
at a closed port, since fleet routes never reach Temporal.
"""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import httpx
import pytest

from orchestrator.api import TemporalGateway
from orchestrator.catalogue import SEED_MODELS
from orchestrator.config import BerthConfig
from orchestrator.engines.replicas import SimulatedReplicaEngine
from orchestrator.node import SimulatedDiscovery, WeightsCache, parse_simulate
from orchestrator.node.agent import NodeAgent, NodeOptions, registration
from orchestrator.node.control_plane import (
    ControlPlane,
    ControlPlaneError,
    ControlPlaneUnreachable,
    CredentialRefused,
    JoinRefused,
    NodeUnknown,
)
from orchestrator.node.replicas import ReplicaManager
from orchestrator.server import create_app
from orchestrator.store import Store
from sdk.wire.fleet import NodeHeartbeat
from sdk.wire.identity import Role

JOIN_TOKEN = "join-me-unit"


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_app(tmp: Path, name: str = "berth"):
    config = BerthConfig(data_dir=tmp, database_url=f"sqlite:///{tmp}/{name}.db", join_token=JOIN_TOKEN)
    store = Store.open(config.resolved_database_url)
    return create_app(config, store, TemporalGateway(f"127.0.0.1:{closed_port()}")), store


@pytest.fixture
def app(tmp_path: Path):
    app, store = make_app(tmp_path)
    yield app
    store.close()


def reader(app) -> httpx.AsyncClient:
    """The app's user routes, with a viewer key (the node agent itself needs none)."""
    key = app.state.services.store.keys.create(Role.viewer).key
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app), base_url="http://berth", headers={"authorization": f"Bearer {key}"}
    )


def plane(app) -> ControlPlane:
    return ControlPlane("http://berth", transport=httpx.ASGITransport(app))


def options(tmp_path: Path, **fields: object) -> NodeOptions:
    """gpu-a's options; with the cluster token unless `join_token` says otherwise (it then waits for approval)."""
    return NodeOptions(
        **{"node_id": "gpu-a", "join_token": JOIN_TOKEN, "cache_dir": tmp_path / "node", "zone": "z1", **fields}
    )  # type: ignore[arg-type]


def admitted(app, node_id: str = "gpu-a") -> str:
    """A per-node join token for `node_id`: the node joins admitted."""
    return app.state.services.store.node_admission.mint(node_id, 600).join_token


def agent_for(app, tmp_path: Path, simulate: str = "2xH100-80GB", **fields: object) -> NodeAgent:
    opts = options(tmp_path, **fields)
    discovery = SimulatedDiscovery(parse_simulate(simulate), opts.node_id)
    cache = WeightsCache(opts.cache_dir / "cache", 50 * 2**30)
    engine = SimulatedReplicaEngine(load_time_scale=0.001, latency_scale=0, log_dir=tmp_path / "logs")
    return NodeAgent(opts, discovery, plane(app), ReplicaManager(cache, {"simulated": engine}))


async def test_register_then_heartbeat(app, tmp_path: Path) -> None:
    gpus = SimulatedDiscovery(parse_simulate("1xH100-80GB"), "gpu-a").discover()
    async with plane(app) as cp:
        joined = await cp.register(registration(options(tmp_path, join_token=admitted(app)), gpus, 10 * 2**30))
        assert joined.node.node_id == "gpu-a" and joined.node.gpus[0].type_name == "H100-80GB"
        view = await cp.heartbeat(NodeHeartbeat(node_id="gpu-a"), joined.node_secret)
        assert view.last_heartbeat_at is not None and view.status == "healthy"
        with pytest.raises(NodeUnknown, match="ghost"):
            await cp.heartbeat(NodeHeartbeat(node_id="ghost"), joined.node_secret)


async def test_a_wrong_join_token_is_refused_with_the_reason(app, tmp_path: Path) -> None:
    async with plane(app) as cp:
        with pytest.raises(JoinRefused, match="join token is wrong"):
            await cp.register(registration(options(tmp_path, join_token="guess"), [], 2**30))


async def test_a_taken_node_id_is_refused(app, tmp_path: Path) -> None:
    async with plane(app) as cp:
        await cp.register(registration(options(tmp_path), [], 2**30))
        with pytest.raises(JoinRefused, match="is taken"):
            await cp.register(registration(options(tmp_path), [], 2**30), node_secret="someone-else")


async def test_an_unreachable_control_plane_is_retried_then_reported(tmp_path: Path) -> None:
    async with ControlPlane(f"http://127.0.0.1:{closed_port()}") as cp:
        with pytest.raises(ControlPlaneUnreachable, match="did not answer within"):
            await cp.register(registration(options(tmp_path), [], 2**30), wait_s=0.5, retry_every_s=0.1)


async def test_the_agent_keeps_its_secret_and_rejoins_as_itself_after_a_restart(app, tmp_path: Path) -> None:
    first = agent_for(app, tmp_path)
    await first.join()
    assert (tmp_path / "node" / "node-secret").read_text() == first.node_secret
    assert (tmp_path / "node" / "node-secret").stat().st_mode & 0o777 == 0o600
    restarted = agent_for(app, tmp_path)
    await restarted.join()  # same id, same secret from the file: not refused as an impostor
    assert restarted.node_secret == first.node_secret
    await restarted.heartbeat()


async def test_a_heartbeat_carries_gpus_cache_and_replicas(app, tmp_path: Path) -> None:
    agent = agent_for(app, tmp_path, join_token=admitted(app))
    await agent.join()
    small = next(m for m in SEED_MODELS if m.name == "llama-3.2-1b")
    try:
        await agent.replicas.load(small, (1,), "r1")
        await agent.heartbeat()
        async with reader(app) as api:
            node = (await api.get("/v1/nodes/gpu-a")).json()
        assert [(r["model"], r["gpu_indexes"], r["state"]) for r in node["replicas"]] == [("llama-3.2-1b", [1], "warm")]
        assert [w["model"] for w in node["cached_weights"]] == ["llama-3.2-1b"]
        assert node["gpus"][1]["memory_used_mib"] == round(small.memory_need_gib * 1024)
        assert node["gpus"][0]["memory_used_mib"] == 0
    finally:
        await agent.replicas.stop_all(grace_s=2)


async def test_a_control_plane_that_lost_the_node_gets_a_registration(app, tmp_path: Path) -> None:
    """With the cluster token: the node is back, pending (an empty database admits nobody on its own)."""
    agent = agent_for(app, tmp_path)
    await agent.join()
    fresh, store = make_app(tmp_path, "fresh")  # the control plane came back with an empty database
    try:
        agent.control_plane = plane(fresh)
        await agent.heartbeat()
        async with reader(fresh) as api:
            node = (await api.get("/v1/nodes/gpu-a")).json()
        assert node["status"] == "pending" and node["last_heartbeat_at"] is not None
    finally:
        store.close()


async def test_a_pending_node_says_it_waits_until_it_is_approved(app, tmp_path: Path) -> None:
    agent = agent_for(app, tmp_path)
    await agent.join()
    await agent.heartbeat()
    assert agent.readiness() == "waiting for an operator's approval (berth nodes approve gpu-a)"
    app.state.services.store.node_admission.approve("gpu-a")
    await agent.heartbeat()
    assert agent.readiness() is None


async def test_a_revoked_node_stops_heartbeating_and_keeps_the_refusal(app, tmp_path: Path) -> None:
    agent = agent_for(app, tmp_path, join_token=admitted(app), heartbeat_s=0.05)
    await agent.join()
    app.state.services.store.node_admission.revoke("gpu-a")
    await asyncio.wait_for(agent.heartbeat_loop(), timeout=5)  # returns: it does not beat on against a 401
    assert agent.stopping.is_set() and isinstance(agent.refused, CredentialRefused)
    assert "was revoked" in str(agent.refused) and "gpu-a" in str(agent.refused)


async def test_a_node_serving_peers_says_where_and_sends_its_measured_transfers_once(app, tmp_path: Path) -> None:
    store = app.state.services.store
    agent = agent_for(app, tmp_path, join_token=admitted(app), peer_port=0, engines=["simulated"])
    await agent.join()
    await agent._start_peer_server()
    try:
        assert agent.peer_server is not None and agent.peer_server.port > 0
        agent.transfers.record_disk(64 * 2**20, 0.5)
        await agent.heartbeat()
        async with reader(app) as api:
            assert (await api.get("/v1/nodes/gpu-a")).json()["engines"] == ["simulated"]
        assert [(s.node_id, s.tier) for s in store.peers.samples_after(0)] == [("gpu-a", "disk")]
        assert agent.transfers.drain() == []  # sent: not sent again
        agent.transfers.record_disk(64 * 2**20, 0.5)
        agent.control_plane = ControlPlane(f"http://127.0.0.1:{closed_port()}")
        with pytest.raises((ControlPlaneError, httpx.HTTPError)):
            await agent.heartbeat()
        assert len(agent.transfers.drain()) == 1  # kept for the next beat that gets through
    finally:
        await agent.peer_server.stop()
