"""A tool worker run by a service manager stops on its SIGTERM as it does on Ctrl-C: promptly, with exit 0."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client

from sdk import Agent
from tests.conftest import ROOT

WORKER = textwrap.dedent("""
    import sys
    from sdk import Agent, serve_blocking, tool

    @tool
    def echo(text: str) -> str:
        return text

    serve_blocking(Agent(sys.argv[2], "llama-3.2-1b", "Echo.", [echo]), temporal_address=sys.argv[1],
                   register=False)
    print("serve_blocking returned", flush=True)
""")


def _as_from_a_terminal() -> None:
    """Ctrl-C reaches the worker as it would started from a terminal: a suite started in the background (nohup,
    `make test &`) ignores SIGINT, and a child inherits that, so Python would never see the signal."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


async def polled(client: Client, queue: str) -> bool:
    described = await client.workflow_service.describe_task_queue(
        DescribeTaskQueueRequest(
            namespace=client.namespace,
            task_queue=TaskQueue(name=queue),
            task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY,
        )
    )
    return bool(described.pollers)


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
async def test_serve_blocking_returns_on_the_signal_and_the_process_exits_cleanly(
    temporal_client: Client, tmp_path: Path, stop: signal.Signals
) -> None:
    name = f"clerk-stopped-by-{stop.name.lower()}"  # a queue of its own: a stopped worker's poller lingers a while
    queue = Agent(name, "llama-3.2-1b", "Echo.", []).spec().task_queue
    log = tmp_path / "worker.log"
    with log.open("w") as out:
        worker = subprocess.Popen(
            [sys.executable, "-c", WORKER, temporal_client.service_client.config.target_host, name],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=_as_from_a_terminal,
        )
    try:
        for _ in range(1200):  # its activity poller reaching the server is the sign it serves
            if worker.poll() is not None or await polled(temporal_client, queue):
                break
            await asyncio.sleep(0.1)
        assert worker.poll() is None, log.read_text()[-3000:]
        worker.send_signal(stop)
        try:
            await asyncio.to_thread(worker.wait, 60)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the worker ignored {stop.name}:\n{log.read_text()[-3000:]}") from None
    finally:
        if worker.poll() is None:
            worker.kill()
    assert worker.returncode == 0, log.read_text()[-3000:]
    assert "serve_blocking returned" in log.read_text()
