"""Agents use MCP tools: a real stdio MCP server (tests/mcp_fixtures/echo_server.py, built with the
official `mcp` package) whose tools the tool worker discovers and runs as activities for real tasks."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from sdk import Agent, InvalidSpec, McpServer, McpUnreachable, TaskStatus, serve
from sdk._errors import McpToolError
from sdk._mcp_server import BerthAccess
from sdk._mcp_tools import McpToolbox
from sdk.wire.contracts import ToolCallInput
from tests.conftest import free_port, wait_http

ECHO_SERVER = Path(__file__).resolve().parent.parent / "mcp_fixtures" / "echo_server.py"


def echo_server(journal: Path, tools: str, name: str = "echo", **fields: object) -> McpServer:
    return McpServer(
        name=name,
        command=[sys.executable, str(ECHO_SERVER)],
        env={"ECHO_JOURNAL": str(journal), "ECHO_TOOLS": tools},
        **fields,
    )


def journal_of(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def call(name: str, task_id: str = "t1", arguments: str = '{"topic": "x"}') -> ToolCallInput:
    return ToolCallInput(task_id=task_id, step=1, call_id="c1", name=name, arguments=arguments)


async def test_an_agent_calls_its_mcp_servers_tools_as_activities(berth, tmp_path: Path) -> None:
    journal = tmp_path / "journal.jsonl"
    agent = Agent(
        berth.unique("archivist"),
        "llama-3.1-8b",
        "Use the archive.",
        mcp_servers=[echo_server(journal, "lookup,flaky,broken", max_attempts=2)],
    )
    registered = await berth.serve(agent)
    assert [t.name for t in registered.tools] == ["echo__lookup", "echo__flaky", "echo__broken"]
    assert registered.tools[0].description == "Look a topic up in the archive."
    assert registered.tools[0].parameters["required"] == ["topic"]
    assert registered.tools[0].max_attempts == 2

    state = await (await berth.start(agent, "H100 bandwidth", 20_000)).result()

    assert state.status == TaskStatus.completed, state.error
    whole = berth.store.checkpoints.read(berth.store.checkpoints.latest(state.task_id).id)
    results = {m.name: m.content for m in whole.messages if m.role == "tool"}
    assert results["echo__lookup"] == "archive says H100 bandwidth: 4.8 TB/s"
    assert results["echo__flaky"] == "flaky answered on H100 bandwidth"  # on the activity's second attempt
    assert results["echo__broken"].startswith("tool error: echo__broken failed after 2 attempt(s)")
    assert "the archive is offline for H100 bandwidth" in results["echo__broken"]
    assert "archive says" in state.result and "A tool reported an error" in state.result  # the model read both
    keys: dict[str, list[str]] = {}
    for entry in journal_of(journal):
        if entry["tool"] != "exit":
            keys.setdefault(entry["tool"], []).append(entry["key"])
    assert len(keys["lookup"]) == 1 and keys["lookup"][0].startswith(f"{state.task_id}/1/")
    assert len(keys["flaky"]) == 2 and len(set(keys["flaky"])) == 1  # a retried activity keeps its key
    assert len(keys["broken"]) == 2 and len(set(keys["broken"])) == 1
    assert len({keys["lookup"][0], keys["flaky"][0], keys["broken"][0]}) == 3


async def test_a_berth_token_server_runs_per_task_holding_that_tasks_token(berth, tmp_path: Path) -> None:
    journal = tmp_path / "journal.jsonl"
    tokens: dict[str, str] = {}

    async def task_token(task_id: str) -> str:
        return tokens.setdefault(task_id, f"berth_task_{uuid.uuid4().hex}")

    access = BerthAccess("http://127.0.0.1:8080", task_token, own_key="worker-key")
    agent = Agent(
        berth.unique("operator"),
        "llama-3.1-8b",
        "Check.",
        mcp_servers=[echo_server(journal, "whoami", name="berth", berth_token=True)],
    )
    await berth.serve(agent, access)
    handles = [await berth.start(agent, "fleet check", 20_000) for _ in range(2)]
    states = await asyncio.gather(*(h.result() for h in handles))

    assert all(s.status == TaskStatus.completed for s in states), [s.error for s in states]
    ran = [e for e in journal_of(journal) if e["tool"] == "whoami"]
    task_of = {token: task_id for task_id, token in tokens.items()}
    assert sorted(task_of[e["token"]] for e in ran) == sorted(s.task_id for s in states)
    assert all(e["key"].startswith(f"{task_of[e['token']]}/") for e in ran)  # each task's call, its own token
    assert all(e["api"] == "http://127.0.0.1:8080" for e in ran)
    assert len({e["pid"] for e in ran}) == 2  # a server process per task
    for state in states:
        history = await berth.client.get_workflow_handle(state.task_id).fetch_history()
        assert tokens[state.task_id] not in history.to_json()
        assert tokens[state.task_id] not in str([e.data for e in berth.store.events.read(state.task_id)])


async def test_serve_stops_naming_a_server_it_cannot_reach(tmp_path: Path) -> None:
    # The API and Temporal addresses answer nothing: serve must stop before it tries to register.
    for server in (
        McpServer(name="gone", command=[str(tmp_path / "no-such-program")]),
        McpServer(name="gone", url="http://127.0.0.1:9/mcp"),
    ):
        agent = Agent("unreachable", "llama-3.1-8b", mcp_servers=[server])
        with pytest.raises(McpUnreachable) as refused:
            await serve(agent, temporal_address="127.0.0.1:9", api_url="http://127.0.0.1:9")
        assert refused.value.field == "mcp_servers.gone"
        assert "'gone'" in refused.value.message


async def test_a_tool_name_that_clashes_is_refused_at_start(tmp_path: Path) -> None:
    toolbox = McpToolbox([echo_server(tmp_path / "journal.jsonl", "lookup")], native_tools=["echo__lookup"])
    with pytest.raises(InvalidSpec) as refused:
        await toolbox.__aenter__()
    assert refused.value.field == "mcp_servers.echo.tools.lookup"
    assert "the agent's own tool" in refused.value.message


async def test_a_server_that_died_is_started_again_once(tmp_path: Path) -> None:
    journal = tmp_path / "journal.jsonl"
    async with McpToolbox([echo_server(journal, "lookup,crash")]) as toolbox:
        with pytest.raises(McpToolError, match="again"):
            await toolbox.call(call("echo__crash", arguments="{}"))
        assert await toolbox.call(call("echo__lookup")) == "archive says x: 4.8 TB/s"
    crashes = [e for e in journal_of(journal) if e["tool"] == "crash"]
    assert [e["key"] for e in crashes] == ["t1/1/c1", "t1/1/c1"]  # sent once more, to a new process
    assert len({e["pid"] for e in crashes}) == 2


async def test_a_tasks_server_is_closed_when_the_task_stops_calling_it(tmp_path: Path) -> None:
    journal = tmp_path / "journal.jsonl"

    async def task_token(task_id: str) -> str:
        return f"token-of-{task_id}"

    server = echo_server(journal, "whoami", name="berth", berth_token=True)
    async with McpToolbox([server], berth=BerthAccess("http://api", task_token), idle_close_s=0.3) as toolbox:
        assert await toolbox.call(call("berth__whoami", arguments="{}")) == "whoami ran"
        pid = next(e["pid"] for e in journal_of(journal) if e["tool"] == "whoami")
        for _ in range(100):
            if any(e["tool"] == "exit" and e["pid"] == pid for e in journal_of(journal)):
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError("the idle task's MCP server is still running")
        assert await toolbox.call(call("berth__whoami", arguments="{}")) == "whoami ran"  # opened again


@pytest.fixture
def http_echo_server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """The echo server over streamable HTTP, as its own process; yields its URL and journal."""
    port, journal = free_port(), tmp_path / "journal.jsonl"
    env = os.environ | {"ECHO_JOURNAL": str(journal), "ECHO_TOOLS": "lookup", "ECHO_HTTP_PORT": str(port)}
    proc = subprocess.Popen([sys.executable, str(ECHO_SERVER)], env=env, stderr=subprocess.DEVNULL)
    try:
        wait_http(f"http://127.0.0.1:{port}/mcp", proc=proc)
        yield f"http://127.0.0.1:{port}/mcp", journal
    finally:
        proc.terminate()
        proc.wait(10)


async def test_a_streamable_http_server_gets_its_headers_and_the_key(http_echo_server: tuple[str, Path]) -> None:
    url, journal = http_echo_server
    server = McpServer(name="web", url=url, headers={"Authorization": "Bearer web-secret"})
    async with McpToolbox([server]) as toolbox:
        assert toolbox.names == ["web__lookup"]
        assert await toolbox.call(call("web__lookup")) == "archive says x: 4.8 TB/s"
    [entry] = [e for e in journal_of(journal) if e["tool"] == "lookup"]
    assert entry["key"] == "t1/1/c1" and entry["authorization"] == "Bearer web-secret"
