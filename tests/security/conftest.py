"""The attacker's bench: the real app in-process over a real SQLite store and a real Temporal dev server.

Every test here plays a party that lies (a node, a task token, another tenant's key) against the
real routes, and checks that the route acted only on what that party provably owns, answering
another tenant's things exactly as missing ones. No worker polls the control queue unless a test
starts one, so workflows the API starts stay at their first workflow task.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
import uvicorn
from temporalio.client import Client as TemporalClient
from temporalio.service import RPCError

from orchestrator.api import TemporalGateway
from orchestrator.config import BerthConfig
from orchestrator.server import create_app
from orchestrator.store import Store
from orchestrator.worker import build_worker
from sdk.wire.identity import Role
from tests.security.parties import JOIN_TOKEN, Live

SERVER_START_TIMEOUT_S = 120.0  # generous for a loaded 2-core machine


@pytest.fixture
def config(tmp_path: Path) -> BerthConfig:
    return BerthConfig(data_dir=tmp_path, database_url=f"sqlite:///{tmp_path}/berth.db", join_token=JOIN_TOKEN)


@pytest.fixture
def store(config: BerthConfig) -> Iterator[Store]:
    store = Store.open(config.resolved_database_url)
    yield store
    store.close()


@pytest.fixture
async def gateway(temporal_client: TemporalClient, store: Store) -> AsyncIterator[TemporalGateway]:
    yield TemporalGateway.from_client(temporal_client)
    # No worker runs these (unless a test started one on its own queue): end them, so no later test's
    # worker picks up a task whose agent its own store does not know.
    for state in store.tasks.list(limit=500):
        try:
            await temporal_client.get_workflow_handle(state.task_id).terminate("security test over")
        except RPCError:
            pass


@pytest.fixture
def app(config: BerthConfig, store: Store, gateway: TemporalGateway):
    return create_app(config, store, gateway)


@pytest.fixture
async def api_url(app) -> AsyncIterator[str]:
    """The app under uvicorn on a free loopback port, in a thread of this process: for parties that must come
    over real connections (a burst of joins, a `berth` process of its own)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, name="berth-api-on-loopback", daemon=True)
    thread.start()
    deadline = time.monotonic() + SERVER_START_TIMEOUT_S
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the API server did not start"
        await asyncio.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.to_thread(thread.join, 30)


@pytest.fixture
def admin_key(store: Store) -> str:
    return store.keys.create(Role.admin, name="security-tests").key


@pytest.fixture
async def api(app, admin_key: str) -> AsyncIterator[httpx.AsyncClient]:
    """The app in-process, called with an admin key (other parties: `client_as`)."""
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app), base_url="http://berth", headers={"authorization": f"Bearer {admin_key}"}
    ) as client:
        yield client


@pytest.fixture
def client_as(app, store: Store):
    """`async with client_as(Role.agent, tenant="acme") as http:` — a client holding a new key of that role."""

    @asynccontextmanager
    async def make(role: Role, tenant: str | None = None, key: str | None = None) -> AsyncIterator[httpx.AsyncClient]:
        key = key or store.keys.create(role, tenant, name=f"security-{role.value}").key
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app), base_url="http://berth", headers={"authorization": f"Bearer {key}"}
        ) as client:
            yield client

    return make


@pytest.fixture
async def live(temporal_client: TemporalClient, engine_url: str, tmp_path: Path) -> AsyncIterator[Live]:
    """The app with a real worker behind it on a queue of its own and the simulated engine: workflows run."""
    config = BerthConfig(
        data_dir=tmp_path / "live",
        engine_url=engine_url,
        database_url=f"sqlite:///{tmp_path}/live.db",
        join_token=JOIN_TOKEN,
    )
    store = Store.open(config.resolved_database_url)
    queue = f"control-{uuid.uuid4().hex[:8]}"
    app = create_app(config, store, TemporalGateway.from_client(temporal_client, task_queue=queue))
    async with build_worker(temporal_client, store, config, task_queue=queue):
        yield Live(app, store, temporal_client, queue)
    for state in store.tasks.list(limit=500):
        try:
            await temporal_client.get_workflow_handle(state.task_id).terminate("security test over")
        except RPCError:
            pass
    store.close()
