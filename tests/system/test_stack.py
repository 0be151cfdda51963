"""The whole system as a user runs it: `berth up`, the SDK, the CLI, a worker killed mid-task, and no secret
leaking: provider credentials (the stacks run with canary ones, conftest.PROVIDER_CANARIES) and API keys
appear in no log, workflow history, API answer or page."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys

import httpx
import pytest
from temporalio.client import Client as TemporalClient

from sdk import Budget, Ended, StepFinished, SyncClient, TaskStatus, TokenDelta
from tests.conftest import ROOT
from tests.system.books import assert_books_balance, assert_nothing_hidden_nothing_twice
from tests.system.conftest import PROVIDER_CANARIES, Stack

pytestmark = pytest.mark.system

RESEARCH_INPUT = "H100 memory bandwidth; A100 memory bandwidth; decode speed for an 8b model"


def test_berth_up_says_what_it_starts_before_it_is_ready(stack: Stack) -> None:
    printed = (stack.data_dir.parent / "up.log").read_text(errors="replace")
    starting = next(line for line in printed.splitlines() if line.startswith("starting "))
    assert all(name in starting for name in ("temporal", "server", "worker")), starting
    assert printed.index(starting) < printed.index("Berth is up")


def test_a_stream_carries_the_answer_as_it_is_written_then_the_end(stack: Stack) -> None:
    """Deltas come from the node as the engine writes them while the step runs; joined, they are the answer the
    task ends with (tests/system/test_token_deltas.py checks every step's, exactly), and the typed events around
    them say which step and how it ended. `berth tasks events
    --text`, following the same task, prints that text between its event lines."""
    with SyncClient(stack.api, stack.admin_key()) as client:
        task = client.submit("writer", "berths\nlength: 3000 tokens", budget=Budget(tokens=80_000))  # ~8 s of writing
        cli = subprocess.Popen(
            [sys.executable, "-m", "orchestrator.cli.main", "tasks", "events", task.task_id, "--text"],
            env=stack.env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        events = list(task.stream())
    printed, _ = cli.communicate(timeout=120)
    ended = events[-1]
    assert isinstance(ended, Ended) and ended.status == TaskStatus.completed, ended
    answer = [e for e in events if isinstance(e, TokenDelta) and e.step == ended.step]
    assert len(answer) >= 2, [type(e).__name__ for e in events]  # written over several heartbeats, not at once
    written = "".join(d.text for d in answer)
    assert written and ended.result.startswith(written)
    assert any(isinstance(e, StepFinished) and e.tool_calls for e in events)  # the research steps before it
    assert events.index(answer[0]) > max(
        i for i, e in enumerate(events) if isinstance(e, StepFinished) and e.step < ended.step
    )
    assert cli.returncode == 0 and "Report on berths." in printed  # the answer's text, which no event line holds


def test_sdk_submit_runs_to_a_result(stack: Stack) -> None:
    client = SyncClient(stack.api, stack.admin_key())
    handle = client.submit("research", RESEARCH_INPUT, budget=Budget(20_000), task_id="default:sys-sdk-1")
    answer = handle.result(timeout=120)
    state = handle.status()
    assert state.status == TaskStatus.completed
    assert "H100" in answer and state.step == 7
    assert state.spend.tokens_used <= 20_000
    assert_books_balance(stack, "default:sys-sdk-1")
    kinds = {e.kind for e in handle.events()}
    assert {"state", "llm_call", "step"} <= kinds


def test_cli_submit_wait_and_refusal(stack: Stack) -> None:
    env = {**stack.env}
    ok = subprocess.run(
        [
            sys.executable,
            "-m",
            "orchestrator.cli.main",
            "submit",
            "research",
            "--input",
            "L4 memory bandwidth",
            "--budget",
            "10000",
            "--task-id",
            "default:sys-cli-1",
            "--wait",
        ],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ok.returncode == 0, ok.stderr
    assert "default:sys-cli-1" in ok.stdout
    refused = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli.main", "submit", "research", "--input", "x", "--budget", "0"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 2
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: budget")
    shown = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli.main", "tasks", "show", "default:sys-cli-1"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0 and "completed" in shown.stdout


def test_worker_killed_mid_task_is_restarted_and_the_task_completes(stack: Stack) -> None:
    client = SyncClient(stack.api, stack.admin_key())
    handle = client.submit(
        "research", RESEARCH_INPUT + "; L4 memory bandwidth", budget=Budget(30_000), task_id="default:sys-kill-worker"
    )
    stack.wait_for_step("default:sys-kill-worker", 2)
    os.kill(stack.child_pid("worker"), signal.SIGKILL)
    handle.result(timeout=180)
    state = handle.status()
    assert state.status == TaskStatus.completed
    assert state.step == 9
    assert_books_balance(stack, "default:sys-kill-worker")
    assert "worker exited with code -9" in stack.log_tail()


def test_whole_stack_restarted_mid_task_resumes_it(stack: Stack) -> None:
    """Stops and starts the shared stack itself (on the same data dir), as an operator would."""
    client = SyncClient(stack.api, stack.admin_key())
    subjects = "; ".join(
        ["H100 memory bandwidth", "A100 memory bandwidth", "L4 memory bandwidth", "spot preemption", "kv cache size"]
    )
    client.submit("research", subjects, budget=Budget(50_000), task_id="default:sys-restart")
    stack.wait_for_step("default:sys-restart", 3)
    stack.stop()
    assert stack.process.returncode == 0, stack.log_tail()

    stack.start()
    handle = SyncClient(stack.api, stack.admin_key()).task("default:sys-restart")
    handle.result(timeout=180)
    state = handle.status()
    assert state.status == TaskStatus.completed
    assert state.step == 11
    # The stop hands a generation in flight over like any node stop: the engine may have finished
    # writing a reply whose last chunk the stopping node never read.
    assert_nothing_hidden_nothing_twice(stack, "default:sys-restart")


def _secrets(stack: Stack, extra_keys: list[str]) -> dict[str, str]:
    keys = [stack.admin_key(), *extra_keys]
    # The secret part of a key (berth_<id>_<secret>): the id alone is meant to be shown.
    return {**PROVIDER_CANARIES, **{f"secret of key {k.split('_')[1]}": k.split("_", 2)[2] for k in keys}}


async def _histories(stack: Stack) -> str:
    client = await TemporalClient.connect(f"127.0.0.1:{stack.env['BERTH_TEMPORAL_PORT']}")
    texts = []
    async for execution in client.list_workflows():
        history = await client.get_workflow_handle(execution.id, run_id=execution.run_id).fetch_history()
        texts.append(history.to_json())
    return "\n".join(texts)


def _pages(stack: Stack, key: str, task_id: str) -> str:
    with httpx.Client(base_url=stack.api, follow_redirects=True) as browser:
        form = browser.get("/login")
        token = re.search(r'name="csrf_token" value="([^"]+)"', form.text).group(1)  # type: ignore[union-attr]
        browser.post("/login", data={"api_key": key, "csrf_token": token})
        return "\n".join(
            browser.get(path).text
            for path in (
                "/",
                "/tasks",
                f"/tasks/{task_id}",
                f"/tasks/{task_id}/checkpoints/1",
                "/fleet",
                "/models",
                "/tenants",
                "/audit",
            )
        )


def test_no_credential_or_key_is_in_a_log_a_history_an_answer_or_a_page(stack: Stack) -> None:
    made = stack.http.post("/v1/keys", json={"role": "agent", "tenant": "default", "name": "leak-check"}).json()["key"]
    handle = SyncClient(stack.api, made).submit(
        "research", "L4 memory bandwidth", budget=Budget(20_000), task_id="default:sys-secrets-1"
    )
    handle.result(timeout=120)
    secrets = _secrets(stack, [made])

    readable = {
        # The process logs (the server's, the worker's, the nodes', the engines'); `berth up`'s own
        # terminal output prints the first admin key once, on purpose, and is not among them.
        **{f"log {p.name}": p.read_text(errors="replace") for p in stack.data_dir.rglob("*.log")},
        "workflow histories": asyncio.run(_histories(stack)),
        "pages": _pages(stack, stack.admin_key(), "default:sys-secrets-1"),
        **{
            f"GET {path}": stack.http.get(path).text
            for path in (
                "/v1/tasks",
                "/v1/tasks/default:sys-secrets-1",
                "/v1/tasks/default:sys-secrets-1/ledger",
                "/v1/tasks/default:sys-secrets-1/checkpoints/1",
                "/v1/keys",
                "/v1/audit",
                "/v1/models",
                "/v1/nodes",
                "/v1/agents",
                "/v1/tenants",
                "/openapi.json",
            )
        },
    }
    assert len([name for name in readable if name.startswith("log ")]) >= 3
    leaks = [(what, where) for where, text in readable.items() for what, secret in secrets.items() if secret in text]
    assert leaks == []
