"""MCP at /mcp, in-process: the official MCP client over an ASGI transport into the app, its lifespan running.

What needs no worker: the bearer-key gate (401 before any MCP processing), /mcp out of the OpenAPI schema,
tenant scoping of tools and resources, bad input as tool errors on a session that stays usable, and the
audit trail showing the /v1 calls a tool made as the caller's own.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import httpx
import httpx2
import pytest
from api_helpers import end_workflows, put_task, unique
from fastapi import FastAPI
from mcp import Client as McpClient
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from temporalio.testing import WorkflowEnvironment

from orchestrator.api import TemporalGateway
from orchestrator.config import BerthConfig
from orchestrator.server import create_app
from orchestrator.store import Store
from sdk import AgentSpec, ToolSpec
from sdk.wire.identity import Role, TenantSpec

URL = "http://berth"
TOOLS = {
    "submit_task",
    "get_task",
    "list_tasks",
    "wait_for_task",
    "cancel_task",
    "raise_budget",
    "answer_task",
    "approve_tool_call",
    "reject_tool_call",
    "fork_task",
    "list_agents",
    "list_models",
    "fleet_status",
}


@dataclass
class Server:
    app: FastAPI
    store: Store


@asynccontextmanager
async def lifespan_of(app: FastAPI) -> AsyncIterator[None]:
    """The app's lifespan, entered and left by one task of its own: pytest-asyncio may tear a fixture down
    in another task than set it up, and the MCP session manager's task group must be left where it began."""
    up, down = asyncio.Event(), asyncio.Event()

    async def hold() -> None:
        async with app.router.lifespan_context(app):
            up.set()
            await down.wait()

    holder, started = asyncio.create_task(hold()), asyncio.create_task(up.wait())
    await asyncio.wait([holder, started], return_when=asyncio.FIRST_COMPLETED)
    started.cancel()
    if holder.done():
        holder.result()  # the lifespan failed to start: raise its error here
    try:
        yield
    finally:
        down.set()
        await holder


@pytest.fixture(scope="module")
async def server(temporal_env: WorkflowEnvironment, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Server]:
    """The app in-process with its lifespan running (the MCP session manager lives there)."""
    data = tmp_path_factory.mktemp("mcp")
    config = BerthConfig(data_dir=data, database_url=f"sqlite:///{data}/berth.db")
    store = Store.open(config.resolved_database_url)
    app = create_app(config, store, TemporalGateway.from_client(temporal_env.client))
    try:
        async with lifespan_of(app):
            store.tenants.create(TenantSpec(name="acme"))
            yield Server(app, store)
    finally:
        await end_workflows(temporal_env.client, store, "MCP test over")
        store.close()


@pytest.fixture(scope="module")
def agent(server: Server) -> AgentSpec:
    return server.store.agents.register(
        AgentSpec(
            name=unique("scribe"),
            model="llama-3.1-8b",
            max_steps=5,
            tools=[ToolSpec(name="file", description="File it.")],
        )
    )


@asynccontextmanager
async def mcp_as(server: Server, key: str) -> AsyncIterator[McpClient]:
    async with httpx2.AsyncClient(
        transport=httpx2.ASGITransport(server.app), base_url=URL, headers={"authorization": f"Bearer {key}"}, timeout=30
    ) as http:
        async with McpClient(streamable_http_client(f"{URL}/mcp", http_client=http)) as client:
            yield client


def http_to(server: Server) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(server.app), base_url=URL)


def key_of(server: Server, role: Role, tenant: str | None = None) -> str:
    return server.store.keys.create(role, tenant, name="mcp tests").key


def error_text(result) -> str:
    assert result.is_error, result
    return result.content[0].text


@pytest.mark.parametrize("authorization", [None, "Bearer", "Bearer berth_nope.nope", "Basic Zm9vOmJhcg=="])
async def test_a_request_without_a_valid_key_is_refused_before_mcp_sees_it(
    server: Server, authorization: str | None
) -> None:
    headers = {
        "accept": "application/json, text/event-stream",
        **({"authorization": authorization} if authorization else {}),
    }
    async with http_to(server) as http:
        answer = await http.post("/mcp", headers=headers, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert answer.status_code == 401
    assert answer.headers["www-authenticate"] == "Bearer"
    assert answer.json()["error"]["field"] == "authorization"


async def test_a_revoked_key_is_refused(server: Server) -> None:
    created = server.store.keys.create(Role.agent, name="mcp tests")
    server.store.keys.revoke(created.key_id)
    async with http_to(server) as http:
        answer = await http.post(
            "/mcp",
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
            headers={"authorization": f"Bearer {created.key}"},
        )
    assert answer.status_code == 401 and "revoked" in answer.json()["error"]["message"]


async def test_mcp_is_not_part_of_the_http_api_schema(server: Server) -> None:
    async with http_to(server) as http:
        paths = (await http.get("/openapi.json")).json()["paths"]
    assert not any(p.startswith("/mcp") for p in paths)


async def test_the_tools_are_listed_with_input_and_output_schemas(server: Server) -> None:
    async with mcp_as(server, key_of(server, Role.viewer)) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    assert set(tools) == TOOLS
    submit = tools["submit_task"]
    assert {"agent", "input", "budget_tokens"} <= set(submit.input_schema["required"])
    assert submit.output_schema is not None and "task_id" in submit.output_schema["properties"]
    assert tools["submit_task"].description


async def test_another_tenants_task_is_not_found_by_tools_and_resources(server: Server, agent: AgentSpec) -> None:
    theirs = put_task(server.store, agent)  # tenant "default"
    async with mcp_as(server, key_of(server, Role.agent, tenant="acme")) as client:
        refused = await client.call_tool("get_task", {"task_id": theirs.task_id})
        assert "not found: task_id:" in error_text(refused)
        with pytest.raises(MCPError, match="not found"):
            await client.read_resource(f"task://{theirs.task_id}")
        listed = await client.call_tool("list_tasks", {})
        assert not listed.is_error and listed.structured_content["tasks"] == []
    async with mcp_as(server, key_of(server, Role.viewer)) as client:
        read = await client.read_resource(f"task://{theirs.task_id}")
        assert json.loads(read.contents[0].text)["task_id"] == theirs.task_id


async def test_the_id_a_tenant_chose_names_its_task_in_tools_and_resources(server: Server, agent: AgentSpec) -> None:
    chosen = unique("ledger")
    async with mcp_as(server, key_of(server, Role.operator, tenant="acme")) as client:
        submitted = await client.call_tool(
            "submit_task", {"agent": agent.name, "input": "Tally.", "budget_tokens": 900, "task_id": chosen}
        )
        assert not submitted.is_error and submitted.structured_content["task_id"] == f"acme:{chosen}"
        got = await client.call_tool("get_task", {"task_id": chosen})
        assert not got.is_error and got.structured_content["task_id"] == f"acme:{chosen}"
        read = await client.read_resource(f"task://{chosen}")
        assert json.loads(read.contents[0].text)["task_id"] == f"acme:{chosen}"
        waited = await client.call_tool("wait_for_task", {"task_id": chosen, "timeout_s": 0.5})
        assert not waited.is_error and waited.structured_content["timed_out"], waited
        cancelled = await client.call_tool("cancel_task", {"task_id": chosen})
        assert not cancelled.is_error and cancelled.structured_content["task_id"] == f"acme:{chosen}"


async def test_a_task_submitted_by_a_tool_carries_its_class_and_objectives(server: Server, agent: AgentSpec) -> None:
    async with mcp_as(server, key_of(server, Role.operator)) as client:
        submitted = await client.call_tool(
            "submit_task",
            {
                "agent": agent.name,
                "input": "Tally.",
                "budget_tokens": 900,
                "service_class": "batch",
                "objectives": {"deadline_s": 600, "attainment": 0.9},
            },
        )
        assert not submitted.is_error, submitted
        state = submitted.structured_content
        assert state["objectives"]["deadline_s"] == 600 and state["objectives"]["attainment"] == 0.9
        refused = await client.call_tool(
            "submit_task", {"agent": agent.name, "input": "Tally.", "budget_tokens": 900, "objectives": {"ttft_s": -1}}
        )
        assert "objectives.ttft_s" in error_text(refused)
        await client.call_tool("cancel_task", {"task_id": state["task_id"]})


async def test_bad_input_is_a_tool_error_naming_the_field_and_the_session_carries_on(
    server: Server, agent: AgentSpec
) -> None:
    good = {"agent": agent.name, "input": "File the report.", "budget_tokens": 2000}
    async with mcp_as(server, key_of(server, Role.agent)) as client:
        assert "Unknown tool" in error_text(await client.call_tool("launch_rockets", {}))
        assert "budget_tokens" in error_text(await client.call_tool("submit_task", {**good, "budget_tokens": 0}))
        assert "budget_tokens" in error_text(await client.call_tool("submit_task", {**good, "budget_tokens": "lots"}))
        missing = {k: v for k, v in good.items() if k != "agent"}
        assert "agent" in error_text(await client.call_tool("submit_task", missing))
        unknown = error_text(await client.call_tool("submit_task", {**good, "agent": "no-such-agent"}))
        assert "invalid: agent:" in unknown and "no-such-agent" in unknown
        assert "limit" in error_text(await client.call_tool("list_tasks", {"limit": -1}))
        running = put_task(server.store, agent)
        assert "invalid: tokens:" in error_text(await client.call_tool("raise_budget", {"task_id": running.task_id}))
        with pytest.raises(MCPError, match="invalid: seq"):
            await client.read_resource(f"task://{running.task_id}/checkpoints/last")
        submitted = await client.call_tool("submit_task", good)
    assert not submitted.is_error, submitted
    assert submitted.structured_content["agent"] == agent.name


async def test_a_tools_writes_are_audited_as_the_callers_own_v1_requests(server: Server, agent: AgentSpec) -> None:
    created = server.store.keys.create(Role.agent, name="mcp audit")
    async with mcp_as(server, created.key) as client:
        result = await client.call_tool("submit_task", {"agent": agent.name, "input": "File it.", "budget_tokens": 900})
    task_id = result.structured_content["task_id"]
    rows = server.store.audit.list(key_id=created.key_id, limit=50)
    assert [(r.method, r.path, r.target, r.status) for r in rows] == [("POST", "/v1/tasks", task_id, 201)]
    assert not [r for r in server.store.audit.list(limit=500) if r.path.startswith("/mcp")]
