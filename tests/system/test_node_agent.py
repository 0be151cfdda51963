"""`berth node` as a real process beside a real `berth server`: it joins, heartbeats, loads a replica
that serves a chat completion, unloads it, and stops cleanly on SIGTERM; revoked, it stops with the refusal.

The node's activities are called the way the pool will call them: from a workflow, on the
node's own task queue `node/<node_id>`. The calling workflow is a tiny one defined here and
run by a worker in this test on a uuid queue.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import BaseModel
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from orchestrator.store import Store
from sdk.wire.identity import Role
from sdk.wire.node_io import LOAD_REPLICA, PREWARM, UNLOAD_REPLICA, node_task_queue
from tests.conftest import ROOT, free_port, wait_http

pytestmark = pytest.mark.system

JOIN_TOKEN = "sys-join-token"
NODE_ID = "sys-node-1"


class NodeCall(BaseModel):
    activity: str
    queue: str
    arg: dict[str, Any]


@workflow.defn(sandboxed=False)
class CallNode:
    """Runs one node activity on the node's queue, as the pool's workflows will."""

    @workflow.run
    async def run(self, call: NodeCall) -> Any:
        return await workflow.execute_activity(
            call.activity,
            call.arg,
            task_queue=call.queue,
            # A load may take minutes (start_to_close), but a node that stops heartbeating is dead.
            start_to_close_timeout=timedelta(minutes=5),
            heartbeat_timeout=timedelta(seconds=20),
            retry_policy=RetryPolicy(maximum_attempts=1),
        )


def wait_until(check: Callable[[], Any], timeout_s: float = 60, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            value = check()
            if value:
                return value
        except (httpx.HTTPError, KeyError, IndexError, ValueError):
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{what} not within {timeout_s}s")


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, temporal_env: WorkflowEnvironment) -> dict[str, str]:
    tmp = tmp_path_factory.mktemp("node-agent")
    data = tmp / "berth"
    # `berth server` alone makes no key (`berth up` does): make an admin key in its store first.
    store = Store.open(f"sqlite:///{(data / 'berth.db').resolve()}")
    key = store.keys.create(Role.admin, name="node-agent tests").key
    store.close()
    return {
        **os.environ,
        "BERTH_DATA_DIR": str(data),
        "BERTH_API_PORT": str(free_port()),
        "BERTH_JOIN_TOKEN": JOIN_TOKEN,
        "BERTH_ENGINE_LATENCY_SCALE": "0",
        "PYTHONUNBUFFERED": "1",
        "BERTH_TEMPORAL_ADDRESS": temporal_env.client.service_client.config.target_host,
        "BERTH_API_KEY": key,
    }


@pytest.fixture(scope="module")
def http(env: dict[str, str], api: str) -> Iterator[httpx.Client]:
    """The API with the admin key, for the reads the tests make (the node itself needs no key)."""
    with httpx.Client(base_url=api, headers={"authorization": f"Bearer {env['BERTH_API_KEY']}"}) as client:
        yield client


@pytest.fixture(scope="module")
def api(env: dict[str, str]) -> Iterator[str]:
    Path(env["BERTH_DATA_DIR"]).mkdir(parents=True, exist_ok=True)
    log = open(Path(env["BERTH_DATA_DIR"]) / "server.log", "wb")
    server = subprocess.Popen(
        [sys.executable, "-m", "orchestrator.cli.main", "server"],
        env=env,
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{env['BERTH_API_PORT']}"
    try:
        wait_http(f"{url}/healthz", proc=server)
        yield url
    finally:
        stop(server)
        log.close()


def start_node(env: dict[str, str], api: str, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "orchestrator.cli.main",
            "node",
            "--node-id",
            NODE_ID,
            "--simulate",
            "1xH100-80GB",
            "--load-time-scale",
            "0.01",
            "--heartbeat-s",
            "0.5",
            "--api",
            api,
            *extra,
        ],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def node_view(http: httpx.Client, node_id: str = NODE_ID) -> dict:
    return http.get(f"/v1/nodes/{node_id}", timeout=5).json()


def admitted(env: dict[str, str], http: httpx.Client, node_id: str = NODE_ID) -> dict[str, str]:
    """The node's environment with a per-node join token: it joins admitted (with the cluster token it would wait)."""
    minted = http.post(f"/v1/nodes/{node_id}/admit", timeout=10)
    assert minted.status_code == 201, minted.text
    return {**env, "BERTH_JOIN_TOKEN": minted.json()["join_token"]}


async def test_a_node_joins_loads_a_replica_that_serves_unloads_and_stops(
    env: dict[str, str], api: str, http: httpx.Client, temporal_env: WorkflowEnvironment
) -> None:
    node = start_node(admitted(env, http), api)
    try:
        joined = wait_until(lambda: (n := node_view(http))["last_heartbeat_at"] and n, what="the node's heartbeat")
        assert joined["status"] == "healthy"
        assert [g["type_name"] for g in joined["gpus"]] == ["H100-80GB"]

        entry = http.get("/v1/models/llama-3.2-1b").json()["entry"]
        client = temporal_env.client
        queue = f"test-{uuid.uuid4().hex[:8]}"
        async with Worker(client, task_queue=queue, workflows=[CallNode]):
            load = NodeCall(
                activity=LOAD_REPLICA,
                queue=node_task_queue(NODE_ID),
                arg={"model": entry, "gpu_indexes": [0], "replica_id": "sys-r1", "tier": "origin"},
            )
            ready = await client.execute_workflow(CallNode.run, load, id=f"load-{queue}", task_queue=queue)
            assert ready["replica_id"] == "sys-r1" and ready["tier"] == "origin" and ready["load_seconds"] > 0

            # A heartbeat sent while it loaded may still be the latest; the next ones say warm.
            warm = wait_until(
                lambda: (r := node_view(http)["replicas"]) and r[0]["state"] == "warm" and r,
                what="the warm replica in a heartbeat",
            )
            assert [(r["model"], r["gpu_indexes"], r["state"]) for r in warm] == [("llama-3.2-1b", [0], "warm")]
            chat = httpx.post(
                f"{ready['base_url']}/chat/completions",
                timeout=30,
                json={"model": "llama-3.2-1b", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 8},
            )
            assert chat.status_code == 200 and chat.json()["choices"][0]["message"]["content"]

            unload = NodeCall(activity=UNLOAD_REPLICA, queue=node_task_queue(NODE_ID), arg={"replica_id": "sys-r1"})
            await client.execute_workflow(CallNode.run, unload, id=f"unload-{queue}", task_queue=queue)
            wait_until(lambda: node_view(http)["replicas"] == [], what="the replica gone from heartbeats")
            assert [w["model"] for w in node_view(http)["cached_weights"]] == ["llama-3.2-1b"]  # weights stay on disk
            with pytest.raises(httpx.HTTPError):
                httpx.get(f"{ready['base_url']}/models", timeout=2)

            big = http.get("/v1/models/llama-3.1-8b").json()["entry"]
            prewarm = NodeCall(activity=PREWARM, queue=node_task_queue(NODE_ID), arg={"model": big})
            assert (
                await client.execute_workflow(CallNode.run, prewarm, id=f"prewarm-{queue}", task_queue=queue)
                == "origin"
            )
            wait_until(lambda: len(node_view(http)["cached_weights"]) == 2, what="prewarmed weights in a heartbeat")

            load.arg["replica_id"] = "sys-r2"  # from the disk cache this time; left running for SIGTERM
            again = await client.execute_workflow(CallNode.run, load, id=f"reload-{queue}", task_queue=queue)
            assert again["tier"] == "disk"

        node.send_signal(signal.SIGTERM)
        assert node.wait(30) == 0
        assert f"node {NODE_ID} stopped" in (node.stdout.read() if node.stdout else "")
        assert node_view(http)["replicas"] == []  # the last heartbeat said its replicas are gone
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"{again['base_url']}/models", timeout=2)
    finally:
        stop(node)


def test_a_wrong_join_token_ends_the_node_with_one_error_line(env: dict[str, str], api: str) -> None:
    node = start_node({**env, "BERTH_JOIN_TOKEN": "not-the-token"}, api, "--node-id", "sys-intruder")
    out, _ = node.communicate(timeout=60)
    errors = [line for line in out.splitlines() if line.startswith("error:")]
    assert node.returncode == 2 and len(errors) == 1 and "join token is wrong" in errors[0], out


def test_a_revoked_node_stops_with_one_error_line(env: dict[str, str], api: str, http: httpx.Client) -> None:
    node = start_node(admitted(env, http, "sys-revoked"), api, "--node-id", "sys-revoked")
    try:
        wait_until(lambda: node_view(http, "sys-revoked")["last_heartbeat_at"], what="the node's heartbeat")
        assert http.post("/v1/nodes/sys-revoked/revoke", timeout=10).status_code == 200
        out, _ = node.communicate(timeout=60)
    finally:
        stop(node)
    errors = [line for line in out.splitlines() if line.startswith("error:")]
    assert node.returncode == 2 and len(errors) == 1 and "was revoked" in errors[0], out


def test_sigterm_while_the_control_plane_is_still_down_exits_at_once(env: dict[str, str]) -> None:
    node = start_node(env, f"http://127.0.0.1:{free_port()}", "--node-id", "sys-early")
    assert node.stdout is not None
    for line in node.stdout:  # the agent keeps retrying the join: the control plane may be starting
        if "not reachable yet" in line:
            break
    node.send_signal(signal.SIGTERM)
    assert node.wait(15) == 0
