"""Berth as an MCP tool server, driven by the official MCP client against one running `berth up`:
over stdio (`berth mcp` as a subprocess) and over streamable HTTP at /mcp, including budget delegation
through a task token."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import httpx2
import pytest
from mcp import Client as McpClient
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from sdk import TaskStatus
from tests.conftest import ROOT
from tests.system.conftest import Stack, wait_until

pytestmark = pytest.mark.system

ONE_QUESTION = "H100 memory bandwidth"


@asynccontextmanager
async def over_http(stack: Stack, key: str) -> AsyncIterator[McpClient]:
    async with httpx2.AsyncClient(headers={"authorization": f"Bearer {key}"}, timeout=60) as http:
        async with McpClient(streamable_http_client(f"{stack.api}/mcp", http_client=http)) as client:
            yield client


class ProgressLog:
    """The progress notifications one tool call received."""

    def __init__(self) -> None:
        self.seen: list[tuple[float, float | None, str | None]] = []

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        self.seen.append((progress, total, message))


async def wait(client: McpClient, task_id: str) -> tuple[dict, ProgressLog]:
    """wait_for_task's outcome and the progress notifications it sent on the way."""
    progress = ProgressLog()
    waited = await client.call_tool("wait_for_task", {"task_id": task_id, "timeout_s": 120}, progress_callback=progress)
    assert not waited.is_error, waited.content
    return waited.structured_content, progress


async def submit_and_wait(client: McpClient, **submit: object) -> tuple[dict, ProgressLog]:
    submitted = await client.call_tool("submit_task", submit)
    assert not submitted.is_error, submitted.content
    return await wait(client, submitted.structured_content["task_id"])


def assert_reported_steps(progress: ProgressLog, final: dict) -> None:
    assert len(progress.seen) >= 2, progress.seen
    steps = [p for p, _, _ in progress.seen]
    assert steps == sorted(steps) and steps[-1] == final["step"]
    assert progress.seen[-1][1] == final["max_steps"]
    assert f"step {final['step']}/{final['max_steps']}" in progress.seen[-1][2]
    assert "tokens" in progress.seen[-1][2]


async def test_stdio_berth_mcp_submits_waits_with_progress_and_reads_the_task(stack: Stack) -> None:
    server = StdioServerParameters(
        command=sys.executable, args=["-m", "orchestrator.cli.main", "mcp"], env=stack.env, cwd=str(ROOT)
    )
    async with McpClient(server) as client:
        assert "submit_task" in {t.name for t in (await client.list_tools()).tools}
        outcome, progress = await submit_and_wait(
            client, agent="research", input=ONE_QUESTION, budget_tokens=8000, task_id="default:mcp-stdio-1"
        )
        final = outcome["state"]
        assert not outcome["timed_out"] and final["status"] == TaskStatus.completed.value
        assert "H100" in final["result"]
        assert_reported_steps(progress, final)
        read = await client.read_resource("task://default:mcp-stdio-1")
        assert json.loads(read.contents[0].text)["status"] == "completed"


async def test_http_mcp_runs_a_task_and_serves_its_resources(stack: Stack) -> None:
    async with over_http(stack, stack.admin_key()) as client:
        outcome, progress = await submit_and_wait(
            client, agent="research", input=ONE_QUESTION, budget_tokens=8000, priority=3, task_id="default:mcp-http-1"
        )
        final = outcome["state"]
        assert final["status"] == "completed" and final["spend"]["tokens_used"] <= 8000
        assert_reported_steps(progress, final)

        state = json.loads((await client.read_resource("task://default:mcp-http-1")).contents[0].text)
        assert state["task_id"] == "default:mcp-http-1" and state["status"] == "completed"
        checkpoint = json.loads(
            (await client.read_resource("task://default:mcp-http-1/checkpoints/1")).contents[0].text
        )
        assert checkpoint["ref"]["seq"] == 1 and checkpoint["messages"]
        nodes = json.loads((await client.read_resource("fleet://nodes")).contents[0].text)
        fleet = (await client.call_tool("fleet_status", {})).structured_content
        assert {n["node_id"] for n in fleet["nodes"]} == {n["node_id"] for n in nodes} and fleet["gpus"] > 0
        listed = (await client.call_tool("list_tasks", {"agent": "research", "status": "completed"})).structured_content
        assert "default:mcp-http-1" in {t["task_id"] for t in listed["tasks"]}


async def test_waiting_over_mcp_reports_the_answer_as_it_is_written(stack: Stack) -> None:
    async with over_http(stack, stack.admin_key()) as client:
        outcome, progress = await submit_and_wait(
            client,
            agent="writer",
            input="berths\nlength: 2000 tokens",
            budget_tokens=20_000,
            task_id="default:mcp-writing-1",
        )
    final = outcome["state"]
    assert final["status"] == "completed", final
    written = [message.split("; writing: ", 1)[1] for _, _, message in progress.seen if "; writing: " in message]
    assert written, progress.seen  # a 2000-token answer spans many polls
    # Each report carries only what is new (a long stretch cut to its end, after a "…"), in the answer's order.
    at = 0
    for piece in written:
        found = final["result"].find(piece.removeprefix("…"), at)
        assert found >= at, (piece, final["result"][at : at + 200])
        at = found + len(piece.removeprefix("…"))


async def test_http_mcp_refuses_no_key_another_tenant_and_bad_input_and_stays_usable(stack: Stack) -> None:
    refused = httpx.post(
        f"{stack.api}/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        headers={"accept": "application/json, text/event-stream"},
    )
    assert refused.status_code == 401 and refused.headers["www-authenticate"] == "Bearer"

    stack.http.post("/v1/tenants", json={"name": "mcp-other"}).raise_for_status()
    other = stack.http.post("/v1/keys", json={"role": "agent", "tenant": "mcp-other"}).json()["key"]
    ours = stack.http.post(
        "/v1/tasks", json={"agent": "research", "input": ONE_QUESTION, "budget": {"tokens": 6000}}
    ).json()["task_id"]
    async with over_http(stack, other) as client:
        cross = await client.call_tool("get_task", {"task_id": ours})
        assert cross.is_error and "not found: task_id:" in cross.content[0].text
        assert (await client.call_tool("cancel_task", {"task_id": ours})).is_error
        assert "Unknown tool" in (await client.call_tool("delete_everything", {})).content[0].text
        bad = {"agent": "research", "input": "x", "budget_tokens": 0}
        assert "budget_tokens" in (await client.call_tool("submit_task", bad)).content[0].text
        assert (
            "budget_tokens" in (await client.call_tool("submit_task", {**bad, "budget_tokens": "many"})).content[0].text
        )
        unknown = await client.call_tool("submit_task", {**bad, "agent": "nobody", "budget_tokens": 100})
        assert unknown.is_error and "agent" in unknown.content[0].text
        agents = await client.call_tool("list_agents", {})
        assert not agents.is_error and "research" in {a["name"] for a in agents.structured_content["agents"]}


async def test_a_task_token_delegates_within_its_budget_and_is_refused_beyond_it(stack: Stack) -> None:
    """A parent parked on a question; through its token, MCP starts its children from its remainder."""
    stack.http.post(
        "/v1/agents",
        json={"name": "mcp-lead", "model": "llama-3.1-8b", "allow_ask_human": True, "instructions": "Ask first."},
    ).raise_for_status()
    parent_id = stack.http.post(
        "/v1/tasks", json={"agent": "mcp-lead", "input": "ask: shall I delegate?", "budget": {"tokens": 20_000}}
    ).json()["task_id"]
    parked = wait_until(
        lambda: (s := stack.http.get(f"/v1/tasks/{parent_id}").json())["status"] == "awaiting_input" and s,
        60,
        "the parent to ask its question",
    )
    token = stack.http.post(f"/v1/tasks/{parent_id}/token").json()["key"]

    async with over_http(stack, token) as client:
        too_much = await client.call_tool(
            "submit_task", {"agent": "research", "input": ONE_QUESTION, "budget_tokens": 50_000}
        )
        remain = 20_000 - parked["spend"]["tokens_used"]
        assert too_much.is_error
        assert f"budget.tokens: asked for 50000 tokens, but only {remain} remain" in too_much.content[0].text
        outcome, _ = await submit_and_wait(client, agent="research", input=ONE_QUESTION, budget_tokens=5000)
    child = outcome["state"]
    assert child["status"] == "completed" and child["parent_task_id"] == parent_id
    assert child["spend"]["token_limit"] == 5000

    settled = wait_until(
        lambda: (s := stack.http.get(f"/v1/tasks/{parent_id}").json())["spend"]["reserved_for_children"] == 0 and s,
        30,
        "the parent to take back its child's unused tokens",
    )
    assert settled["children"] == [child["task_id"]]
    # The child's spend is the parent's; the rest of its 5000 came back.
    assert settled["spend"]["tokens_used"] == parked["spend"]["tokens_used"] + child["spend"]["tokens_used"]

    async with over_http(stack, stack.admin_key()) as client:
        still = (await client.call_tool("wait_for_task", {"task_id": parent_id, "timeout_s": 0.5})).structured_content
        assert still["timed_out"] and still["state"]["status"] == "awaiting_input"
        answered = await client.call_tool("answer_task", {"task_id": parent_id, "text": "yes"})
        assert not answered.is_error, answered.content
        outcome, _ = await wait(client, parent_id)
    assert outcome["state"]["status"] == "completed"


def test_an_agent_delegates_through_its_own_mcp_server_with_its_task_token(stack: Stack) -> None:
    """End to end: the tool worker mints the calling task's token (POST /v1/tasks/{id}/token), starts the
    agent's `berth_token` MCP server with it, and what that server submits is the task's sub-agent."""
    log = open(stack.data_dir.parent / "delegator-worker.log", "ab")
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "orchestrator.cli.main",
            "worker",
            "--agents",
            "tests.mcp_fixtures.delegating_agent:AGENT",
        ],
        env={**stack.env, "BERTH_API_KEY": stack.admin_key()},
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_until(
            lambda: any(a["name"] == "delegator" for a in stack.http.get("/v1/agents").json()),
            60,
            "the delegator's tool worker to register it",
        )
        task_id = stack.http.post(
            "/v1/tasks", json={"agent": "delegator", "input": "L4 memory bandwidth", "budget": {"tokens": 20_000}}
        ).json()["task_id"]
        final = wait_until(
            lambda: (s := stack.http.get(f"/v1/tasks/{task_id}").json())["status"] in ("completed", "failed") and s,
            180,
            "the delegating task to end",
        )
    finally:
        worker.terminate()
        worker.wait(30)
    assert final["status"] == "completed", final
    (child_id,) = final["children"]
    child = stack.http.get(f"/v1/tasks/{child_id}").json()
    assert child["parent_task_id"] == task_id and child["spend"]["token_limit"] == 4000
    assert child["status"] == "completed" and child_id in final["result"]
    own = stack.http.get(f"/v1/tasks/{task_id}/ledger").json()["totals"]
    assert final["spend"]["reserved_for_children"] == 0
    own_tokens = sum(own[k] for k in ("prompt_tokens", "completion_tokens", "lost_tokens", "kept_tokens"))
    assert final["spend"]["tokens_used"] == own_tokens + child["spend"]["tokens_used"]
    minted = [k for k in stack.http.get("/v1/keys").json() if k["task_id"] == task_id]
    assert len(minted) == 1 and minted[0]["role"] == "agent"
