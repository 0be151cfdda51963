"""The examples an author starts from, run as they are against `berth up`: a streaming chat in a terminal, and
a tool worker that connects with a tenant's key as it would to a remote stack."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.system.conftest import Stack, wait_until

pytestmark = pytest.mark.system


def test_the_streaming_chat_prints_the_answer_as_it_is_written(stack: Stack) -> None:
    ran = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "stream_chat.py"), "length: 6000 tokens"],
        env=stack.env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    summary = re.search(r"\[(\S+) completed, (\d+) characters, (\d+) as they were written\]", ran.stdout)
    assert summary, ran.stdout[-2000:]
    task_id, whole, streamed = summary.group(1), int(summary.group(2)), int(summary.group(3))
    assert 0 < streamed <= whole, ran.stdout[
        -500:
    ]  # deltas came before the end: 6000 tokens take ~4 s here, 8 heartbeats
    answer = stack.http.get(f"/v1/tasks/{task_id}").json()["result"]
    assert len(answer) == whole and answer in ran.stdout


def test_a_tool_worker_with_a_tenants_key_serves_that_tenants_tasks(stack: Stack, tmp_path: Path) -> None:
    stack.http.post("/v1/tenants", json={"name": "warehouse"}).raise_for_status()
    key = stack.http.post("/v1/keys", json={"role": "agent", "tenant": "warehouse", "name": "worker"}).json()["key"]
    env = {**stack.env, "BERTH_API_KEY": key, "TEMPORAL_ADDRESS": f"127.0.0.1:{stack.env['BERTH_TEMPORAL_PORT']}"}
    log = tmp_path / "worker.log"  # a file, not a pipe: a full pipe nobody reads would stall the worker
    with log.open("w") as out:
        worker = subprocess.Popen(
            [sys.executable, str(ROOT / "examples" / "remote_tool_worker.py")],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        as_tenant = {"authorization": f"Bearer {key}"}
        wait_until(
            lambda: (
                stack.http.get("/v1/agents/inventory-example", headers=as_tenant).status_code == 200
                or worker.poll() is not None
            ),
            120,
            "the worker to register its agent",
        )
        assert worker.poll() is None, log.read_text()[-3000:]
        agent = stack.http.get("/v1/agents/inventory-example", headers=as_tenant).json()
        assert [t["name"] for t in agent["tools"]] == ["stock"]
        # Registered by the tenant's key, the agent is the tenant's: another tenant's key does not see it.
        other = stack.http.post("/v1/keys", json={"role": "agent", "tenant": "default"}).json()["key"]
        assert (
            stack.http.get("/v1/agents/inventory-example", headers={"authorization": f"Bearer {other}"}).status_code
            == 404
        )

        submitted = stack.http.post(
            "/v1/tasks",
            headers=as_tenant,
            json={"agent": "inventory-example", "input": "widgets; gadgets", "budget": {"tokens": 20_000}},
        )
        assert submitted.status_code in (200, 201), submitted.text
        task_id = submitted.json()["task_id"]
        assert submitted.json()["tenant"] == "warehouse"
        state = wait_until(
            lambda: (
                (s := stack.http.get(f"/v1/tasks/{task_id}", headers=as_tenant).json())["status"]
                in ("completed", "failed", "out_of_budget")
                and s
            ),
            300,
            "the task to end",
        )
        assert state["status"] == "completed", state
        assert "widgets: 120 in stock" in state["result"] and "gadgets: 0 in stock" in state["result"]
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(timeout=60)  # stops promptly on a service manager's signal
        except subprocess.TimeoutExpired:
            worker.kill()
            raise AssertionError(f"the worker ignored SIGTERM:\n{log.read_text()[-3000:]}") from None
    assert worker.returncode == 0, log.read_text()[-3000:]
