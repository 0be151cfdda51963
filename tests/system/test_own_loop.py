"""examples/agents_sdk_on_berth.py against `berth up`: an OpenAI Agents SDK agent as a Berth task, its process
killed with SIGKILL mid-tool and run again with the same task id, resumes without a token or a tool run twice."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.system.conftest import Stack, wait_until

pytestmark = pytest.mark.system

EXAMPLE = ROOT / "examples" / "agents_sdk_on_berth.py"


def run_example(stack: Stack, task_id: str, journal: Path, tool_seconds: float) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            str(EXAMPLE),
            "--task-id",
            task_id,
            "--journal",
            str(journal),
            "--tool-seconds",
            str(tool_seconds),
            "H100 bandwidth; A100 bandwidth",
        ],
        env=stack.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_an_agents_sdk_agent_killed_mid_tool_resumes_with_nothing_done_twice(stack: Stack, tmp_path: Path) -> None:
    journal = tmp_path / "journal.txt"
    journal.touch()
    # Each lookup takes 20 s: long enough to kill the process in the middle of the second one, which starts only
    # after the first one's result was kept and the next model call answered.
    first = run_example(stack, "survey-killed", journal, tool_seconds=20)
    wait_until(
        lambda: "start A100 bandwidth" in journal.read_text() or first.poll() is not None,
        300,
        "the example to reach its second tool call",
    )
    assert first.poll() is None, first.stderr.read()[-3000:] if first.stderr else ""
    os.kill(first.pid, signal.SIGKILL)
    first.wait(timeout=30)
    task_id = "default:survey-killed"
    cut = stack.http.get(f"/v1/tasks/{task_id}").json()
    assert cut["status"] == "running" and cut["step"] == 2

    again = run_example(stack, "survey-killed", journal, tool_seconds=0)
    out, err = again.communicate(timeout=600)
    assert again.returncode == 0, err[-3000:]

    assert journal.read_text().splitlines() == [
        "start H100 bandwidth",
        "done H100 bandwidth",  # kept: not run again
        "start A100 bandwidth",  # killed mid-call: it never reported, so it ran again
        "start A100 bandwidth",
        "done A100 bandwidth",
    ]
    state = stack.http.get(f"/v1/tasks/{task_id}").json()
    assert state["status"] == "completed" and state["step"] == 3
    assert out.splitlines()[0] == f"{task_id} completed steps=3 tokens={state['spend']['tokens_used']}"
    assert "Report on" in state["result"]
    # Each model call was generated once on the pool and booked once; the re-run's replays cost nothing.
    ledger = stack.http.get(f"/v1/tasks/{task_id}/ledger").json()["totals"]
    engine = stack.engine_usage(task_id)
    assert ledger["calls"] == engine["requests"] == 3
    assert ledger["prompt_tokens"] == engine["prompt_tokens"]
    assert ledger["completion_tokens"] == engine["completion_tokens"]
    assert state["spend"]["tokens_used"] == ledger["prompt_tokens"] + ledger["completion_tokens"]


def test_an_agents_sdk_run_killed_while_a_tool_waits_for_approval_resumes_once_approved_from_the_cli(
    stack: Stack, tmp_path: Path
) -> None:
    journal = tmp_path / "orders.txt"
    journal.touch()

    def buyer() -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, "-m", "tests.system.approving_agent", "buy-killed", str(journal), "H100 node"],
            cwd=ROOT,
            env=stack.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    first = buyer()
    task_id = "default:buy-killed"

    def asking() -> dict | None:
        if first.poll() is not None:
            return {}
        reply = stack.http.get(f"/v1/tasks/{task_id}")
        state = reply.json() if reply.status_code == 200 else {}
        return state if state.get("approvals") else None

    waiting = wait_until(asking, 300, "the run to stop at the tool that needs approval")
    assert first.poll() is None, first.stderr.read()[-3000:] if first.stderr else ""
    assert waiting["status"] == "awaiting_input" and waiting["approvals"][0]["tool"] == "transfer"
    assert "H100 node" in waiting["approvals"][0]["arguments"] and "transfer" in waiting["question"]
    os.kill(first.pid, signal.SIGKILL)  # the process dies while it waits
    first.wait(timeout=30)

    approved = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli.main", "tasks", "approve", task_id],
        cwd=ROOT,
        env=stack.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert approved.returncode == 0, approved.stderr
    assert "approved" in approved.stdout

    again = buyer()
    out, err = again.communicate(timeout=600)
    assert again.returncode == 0, err[-3000:]
    assert journal.read_text().splitlines() == ["started", "started", "ordered H100 node"]  # ordered once
    assert "order placed for H100 node" in out
    state = stack.http.get(f"/v1/tasks/{task_id}").json()
    assert state["status"] == "completed" and state["step"] == 2
