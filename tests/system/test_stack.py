"""The whole system as a user runs it: `berth up`, the SDK, the CLI, and a worker killed mid-task."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from sdk import Budget, SyncClient, TaskStatus
from tests.conftest import ROOT

from tests.system.conftest import Stack

pytestmark = pytest.mark.system

RESEARCH_INPUT = "H100 memory bandwidth; A100 memory bandwidth; decode speed for an 8b model"


def assert_books_balance(stack: Stack, task_id: str) -> None:
    """The ledger equals what the engine reports it generated; no tool call ran twice."""
    ledger = stack.http.get(f"/v1/tasks/{task_id}/ledger").json()["totals"]
    engine = stack.engine_usage(task_id)
    assert ledger["calls"] == engine["requests"]
    assert ledger["prompt_tokens"] == engine["prompt_tokens"]
    assert ledger["completion_tokens"] == engine["completion_tokens"]
    runs = stack.tool_runs()
    assert runs and max(runs.values()) == 1, f"a tool call ran twice: {runs.most_common(3)}"


def test_sdk_submit_runs_to_a_result(stack: Stack) -> None:
    client = SyncClient(stack.api, stack.admin_key())
    handle = client.submit("research", RESEARCH_INPUT, budget=Budget(20_000), task_id="sys-sdk-1")
    answer = handle.result(timeout=120)
    state = handle.status()
    assert state.status == TaskStatus.completed
    assert "H100" in answer and state.step == 7
    assert state.spend.tokens_used <= 20_000
    assert_books_balance(stack, "sys-sdk-1")
    kinds = {e.kind for e in handle.events()}
    assert {"state", "llm_call", "step"} <= kinds


def test_cli_submit_wait_and_refusal(stack: Stack) -> None:
    env = {**stack.env}
    ok = subprocess.run([sys.executable, "-m", "orchestrator.cli.main", "submit", "research", "--input",
                         "L4 memory bandwidth", "--budget", "10000", "--task-id", "sys-cli-1", "--wait"],
                        env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert "sys-cli-1" in ok.stdout
    refused = subprocess.run([sys.executable, "-m", "orchestrator.cli.main", "submit", "research", "--input",
                              "x", "--budget", "0"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: budget")
    shown = subprocess.run([sys.executable, "-m", "orchestrator.cli.main", "tasks", "show", "sys-cli-1"],
                           env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0 and "completed" in shown.stdout


def test_worker_killed_mid_task_is_restarted_and_the_task_completes(stack: Stack) -> None:
    client = SyncClient(stack.api, stack.admin_key())
    handle = client.submit("research", RESEARCH_INPUT + "; L4 memory bandwidth", budget=Budget(30_000),
                           task_id="sys-kill-worker")
    stack.wait_for_step("sys-kill-worker", 2)
    os.kill(stack.child_pid("worker"), signal.SIGKILL)
    handle.result(timeout=180)
    state = handle.status()
    assert state.status == TaskStatus.completed
    assert state.step == 9
    assert_books_balance(stack, "sys-kill-worker")
    assert "worker exited with code -9" in stack.log_tail()


def test_whole_stack_restarted_mid_task_resumes_it(tmp_path) -> None:
    stack = Stack.create(tmp_path)
    stack.start()
    try:
        client = SyncClient(stack.api, stack.admin_key())
        subjects = "; ".join(["H100 memory bandwidth", "A100 memory bandwidth", "L4 memory bandwidth",
                              "spot preemption", "kv cache size"])
        client.submit("research", subjects, budget=Budget(50_000), task_id="sys-restart")
        stack.wait_for_step("sys-restart", 3)
        stack.stop()
        assert stack.process.returncode == 0, stack.log_tail()

        stack.start()
        handle = SyncClient(stack.api, stack.admin_key()).task("sys-restart")
        handle.result(timeout=180)
        state = handle.status()
        assert state.status == TaskStatus.completed
        assert state.step == 11
        assert_books_balance(stack, "sys-restart")
    finally:
        stack.stop()
