"""Who can read the figures: the API's /metrics names every tenant with its spend, so it needs a key that may read
every tenant; the worker's and node agents' probe servers listen only on the address their process was told.

The probe servers are real: the worker runs in-process as `berth worker` runs it, the node agent is a real
`berth node` process, and whether a port listens on an address is checked by connecting to it over loopback
(127.0.0.1 and 127.0.0.2 are both this machine, so a server bound to every address answers on both).
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from activities.step.call_metrics import record_settled_call
from orchestrator.config import BerthConfig
from orchestrator.worker import WORKER_METRICS_PORT_ENV, run_worker
from sdk.wire.identity import Role
from sdk.wire.ledger import LedgerEntry
from tests.security.parties import error_of

ROOT = Path(__file__).resolve().parents[2]
START_DEADLINE_S = 120.0  # a process's first answer; generous for a loaded 2-core machine


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def refuses_connections(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=10):
            return False
    except ConnectionRefusedError:
        return True


async def first_answer(url: str) -> httpx.Response:
    """The first answer at `url`, waiting for its server to start (refused or timed-out connects are waited out)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + START_DEADLINE_S
    async with httpx.AsyncClient(timeout=5) as http:
        while True:
            try:
                return await http.get(url)
            except (httpx.ConnectError, httpx.ConnectTimeout):
                assert loop.time() < deadline, f"nothing answered at {url}"
                await asyncio.sleep(0.1)


# -- the API's /metrics -----------------------------------------------------------------------


async def test_the_apis_metrics_need_a_key_that_may_read_every_tenant(app, client_as) -> None:
    tenant = f"t{uuid.uuid4().hex[:8]}"
    # One booked call of the tenant, as settling a step records it.
    record_settled_call(
        LedgerEntry(
            task_id=f"t-{tenant}",
            step=1,
            attempt=1,
            model="llama-3.1-8b",
            prompt_tokens=30,
            completion_tokens=12,
            cost_usd=0.0015,
            ttft_s=0.07,
            duration_s=0.3,
            served_by="gpu-1/r-1",
        ),
        tenant,
    )

    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://berth") as anonymous:
        refused = await anonymous.get("/metrics")
    assert refused.status_code == 401 and error_of(refused)["field"] == "authorization"
    assert tenant not in refused.text
    for role in (Role.agent, Role.operator, Role.viewer):
        async with client_as(role, tenant=tenant) as confined:
            refused = await confined.get("/metrics")
        assert refused.status_code == 403 and error_of(refused)["field"] == "authorization", (role, refused.text)
        assert tenant not in refused.text.replace(f"tenant {tenant}", "")  # named as the key's own, no figures

    async with client_as(Role.viewer) as scraper:
        scraped = await scraper.get("/metrics")
    assert scraped.status_code == 200 and scraped.headers["content-type"].startswith("text/plain")
    assert f'tenant="{tenant}"' in scraped.text


# -- the worker's and node agents' probe servers ----------------------------------------------


@pytest.mark.parametrize(("host", "elsewhere"), [("127.0.0.1", "127.0.0.2"), ("127.0.0.2", "127.0.0.1")])
async def test_the_workers_probe_server_listens_only_on_its_configured_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, host: str, elsewhere: str
) -> None:
    port = free_port(host)
    monkeypatch.setenv(WORKER_METRICS_PORT_ENV, str(port))
    # No Temporal at that address: the worker keeps trying, and its /healthz says it is starting.
    config = BerthConfig(
        data_dir=tmp_path,
        database_url=f"sqlite:///{tmp_path}/berth.db",
        fleet=False,
        host=host,
        temporal_address=f"127.0.0.1:{free_port('127.0.0.1')}",
    )
    worker = asyncio.create_task(run_worker(config, task_queue=f"probes-{uuid.uuid4()}"))
    try:
        answer = await first_answer(f"http://{host}:{port}/healthz")
        assert answer.status_code == 503 and answer.json()["reason"].startswith("starting"), answer.text
        assert await asyncio.to_thread(refuses_connections, elsewhere, port)
    finally:
        worker.cancel()
        await worker


@pytest.fixture
def node_process(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """A real `berth node --host 127.0.0.1 --metrics-port P`, its control plane and Temporal at closed ports: it
    serves its probes (not ready: not joined) while it waits for them."""
    port = free_port("127.0.0.1")
    env = {
        **os.environ,
        "BERTH_TEMPORAL_ADDRESS": f"127.0.0.1:{free_port('127.0.0.1')}",
        "BERTH_DATA_DIR": str(tmp_path),
        "BERTH_HOST": "0.0.0.0",
    }  # the flag wins over the environment
    node = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "orchestrator.cli.main",
            "node",
            "--node-id",
            f"gpu-{uuid.uuid4().hex[:6]}",
            "--simulate",
            "1xH100-80GB",
            "--join-token",
            "join-probes",
            "--api",
            f"http://127.0.0.1:{free_port('127.0.0.1')}",
            "--cache-dir",
            str(tmp_path / "node"),
            "--host",
            "127.0.0.1",
            "--metrics-port",
            str(port),
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        yield node, port
    finally:
        node.terminate()
        try:
            node.wait(timeout=30)
        except subprocess.TimeoutExpired:
            node.kill()
            node.wait()


async def test_a_node_agents_probe_server_listens_only_on_its_host_flag(
    node_process: tuple[subprocess.Popen[bytes], int],
) -> None:
    node, port = node_process
    answer = await first_answer(f"http://127.0.0.1:{port}/healthz")
    assert answer.status_code == 200, answer.text
    assert node.poll() is None
    assert await asyncio.to_thread(refuses_connections, "127.0.0.2", port)
    # Told to stop while it still waits for Temporal, it stops then (it waited out its minute of retries before).
    node.terminate()
    assert await asyncio.to_thread(node.wait, 10) == 0
