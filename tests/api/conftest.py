"""API tests: the real app in-process over a real SQLite store and a real Temporal dev server.

No worker polls the control queue here, so workflows the API starts stay at their first
workflow task; tests look at what the API did (rows, started workflows, signals) and read
task progress from rows they write into the store themselves, as the workflow would.
"""

from __future__ import annotations

import socket
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
from api_helpers import ClientAs, Stack, unique
from temporalio.client import Client as TemporalClient
from temporalio.service import RPCError
from ui_helpers import SignIn, csrf_of

from orchestrator.api import TemporalGateway
from orchestrator.config import BerthConfig
from orchestrator.server import create_app
from orchestrator.store import Store
from orchestrator.worker import build_worker
from sdk import AgentSpec, Client, ToolSpec
from sdk.wire.identity import Role


@pytest.fixture
def config(tmp_path: Path) -> BerthConfig:
    return BerthConfig(data_dir=tmp_path, database_url=f"sqlite:///{tmp_path}/berth.db")


@pytest.fixture
def store(config: BerthConfig) -> Iterator[Store]:
    store = Store.open(config.resolved_database_url)
    yield store
    store.close()


@pytest.fixture
async def gateway(temporal_client: TemporalClient, store: Store) -> AsyncIterator[TemporalGateway]:
    yield TemporalGateway.from_client(temporal_client)
    # No worker will ever run these: end them so that no later test's worker on the
    # control queue picks up a task whose agent its own store does not know.
    for state in store.tasks.list(limit=500):
        try:
            await temporal_client.get_workflow_handle(state.task_id).terminate("API test over")
        except RPCError:
            pass


@pytest.fixture
def app(config: BerthConfig, store: Store, gateway: TemporalGateway):
    return create_app(config, store, gateway)


@pytest.fixture
def admin_key(store: Store) -> str:
    """A valid admin key, as `berth up` makes the first one."""
    return store.keys.create(Role.admin, name="tests").key


@pytest.fixture
async def api(app, admin_key: str) -> AsyncIterator[httpx.AsyncClient]:
    """The app in-process, called with an admin key (other roles: `client_as`)."""
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app), base_url="http://berth", headers={"authorization": f"Bearer {admin_key}"}
    ) as client:
        yield client


@pytest.fixture
def client_as(app, store: Store) -> ClientAs:
    """`async with client_as(Role.viewer, tenant="acme") as http:` — a client with a new key of that role."""

    @asynccontextmanager
    async def make(role: Role, tenant: str | None = None) -> AsyncIterator[httpx.AsyncClient]:
        key = store.keys.create(role, tenant, name=f"tests-{role.value}").key
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app), base_url="http://berth", headers={"authorization": f"Bearer {key}"}
        ) as client:
            yield client

    return make


@pytest.fixture
def agent(store: Store) -> AgentSpec:
    """A registered agent on a self-hosted model, with one tool."""
    spec = AgentSpec(
        name=unique("writer"),
        model="llama-3.1-8b",
        instructions="Write briefly.",
        max_steps=7,
        tools=[ToolSpec(name="lookup", description="Look a word up.")],
    )
    return store.agents.register(spec)


@pytest.fixture
def closed_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
async def stack(temporal_client: TemporalClient, engine_url: str, tmp_path: Path) -> AsyncIterator[Stack]:
    """The app with a real worker on its own control queue, tasks running on the simulated engine."""
    config = BerthConfig(data_dir=tmp_path, engine_url=engine_url, database_url=f"sqlite:///{tmp_path}/berth.db")
    store = Store.open(config.resolved_database_url)
    admin_key = store.keys.create(Role.admin).key
    queue = f"control-{uuid.uuid4().hex[:8]}"
    app = create_app(config, store, TemporalGateway.from_client(temporal_client, task_queue=queue))
    async with build_worker(temporal_client, store, config, task_queue=queue):
        async with Client("http://berth", api_key=admin_key, transport=httpx.ASGITransport(app)) as client:
            yield Stack(client, store, app)
    store.close()


@pytest.fixture
async def browsers(app) -> AsyncIterator[list[httpx.AsyncClient]]:
    """Cookie-keeping clients of the app (each a separate browser), closed after the test."""
    made: list[httpx.AsyncClient] = []
    yield made
    for client in made:
        await client.aclose()


@pytest.fixture
def sign_in(app, store: Store, browsers: list[httpx.AsyncClient]) -> SignIn:
    """`await sign_in(Role.viewer)`: a new browser signed in through the form with a new key of that role
    (admin unless told; or `key=` one of the test's own)."""

    async def make(role: Role = Role.admin, tenant: str | None = None, key: str | None = None) -> httpx.AsyncClient:
        browser = httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://berth")
        browsers.append(browser)
        key = key or store.keys.create(role, tenant, name=f"ui-{role.value}").key
        form = await browser.get("/login")
        signed = await browser.post("/login", data={"api_key": key, "csrf_token": csrf_of(form)})
        assert signed.status_code == 303, signed.text[:500]
        return browser

    return make
