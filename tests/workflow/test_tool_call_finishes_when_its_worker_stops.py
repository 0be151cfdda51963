"""A tool worker told to stop while a tool call runs lets the call finish and be recorded: the call runs once,
its result reaches the workflow, and the worker exits 0. Stopped on the spot instead, the call would be run
again by its retry after a restart (a search that had already run, run twice)."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import textwrap
import uuid
from datetime import timedelta
from pathlib import Path

from temporalio import workflow
from temporalio.client import Client
from temporalio.common import RetryPolicy
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from sdk import Agent
from sdk.wire.contracts import TOOL_ACTIVITY, ToolCallInput, ToolCallResult
from tests.conftest import ROOT

WORKER = textwrap.dedent("""
    import sys, time
    from sdk import Agent, serve_blocking, tool

    @tool
    def slow_note(text: str) -> str:
        with open(sys.argv[3], "a") as journal:
            journal.write("start\\n")
        time.sleep(1.5)
        with open(sys.argv[3], "a") as journal:
            journal.write("end\\n")
        return "noted: " + text

    serve_blocking(Agent(sys.argv[2], "llama-3.2-1b", "Note.", [slow_note]), temporal_address=sys.argv[1],
                   register=False)
""")
STOPPING_WORKER = textwrap.dedent("""
    import asyncio
    from orchestrator.cli.tool_worker import _until_terminated

    async def serve_forever() -> None:
        print("serving", flush=True)
        await asyncio.Event().wait()

    asyncio.run(_until_terminated(serve_forever))
    print("stopped", flush=True)
""")


@workflow.defn(name="ToolCallOnce")
class ToolCallOnce:
    @workflow.run
    async def run(self, queue: str, call: ToolCallInput) -> ToolCallResult:
        return await workflow.execute_activity(
            TOOL_ACTIVITY,
            call,
            task_queue=queue,
            result_type=ToolCallResult,
            start_to_close_timeout=timedelta(seconds=60),
            retry_policy=RetryPolicy(maximum_attempts=3, initial_interval=timedelta(seconds=1)),
        )


async def _until(condition, what: str, timeout_s: float = 120) -> None:  # noqa: ANN001
    for _ in range(int(timeout_s * 10)):
        if condition():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"never saw {what}")


async def test_a_tool_call_running_when_its_worker_is_told_to_stop_finishes_once_and_is_recorded(
    temporal_client: Client, tmp_path: Path
) -> None:
    name = f"noter-{uuid.uuid4().hex[:8]}"
    queue = Agent(name, "llama-3.2-1b", "Note.", []).spec().task_queue
    journal, log = tmp_path / "journal", tmp_path / "worker.log"
    with log.open("w") as out:
        worker = subprocess.Popen(
            [sys.executable, "-c", WORKER, temporal_client.service_client.config.target_host, name, str(journal)],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    control = f"tool-once-{uuid.uuid4().hex[:8]}"
    try:
        # The workflow only schedules the tool call: it needs no sandbox, and this module imports the test helpers.
        async with Worker(
            temporal_client, task_queue=control, workflows=[ToolCallOnce], workflow_runner=UnsandboxedWorkflowRunner()
        ):
            call = ToolCallInput(task_id="t", step=1, call_id="c1", name="slow_note", arguments='{"text": "hi"}')
            handle = await temporal_client.start_workflow(
                ToolCallOnce.run, args=[queue, call], id=f"wf-{control}", task_queue=control
            )
            await _until(lambda: journal.exists() and "start" in journal.read_text(), "the tool call start")
            worker.send_signal(signal.SIGTERM)
            try:  # cut off, the call waits for a worker that is gone, and its result never comes
                result = await asyncio.wait_for(handle.result(), 90)
            except TimeoutError:
                raise AssertionError(
                    f"the stopped worker never finished the call: {journal.read_text().split()}"
                ) from None
        assert result.ok and result.content == "noted: hi"
        assert journal.read_text().split() == ["start", "end"]  # it ran once, to its end
        assert await asyncio.to_thread(worker.wait, 60) == 0, log.read_text()[-3000:]
    finally:
        if worker.poll() is None:
            worker.kill()


def test_berth_worker_stops_on_sigterm_with_exit_0() -> None:
    """`berth worker --agents` (berth up's tools process) ends serve() on SIGTERM rather than dying on it."""
    worker = subprocess.Popen(
        [sys.executable, "-c", STOPPING_WORKER], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        assert worker.stdout is not None and worker.stdout.readline().strip() == "serving"
        worker.send_signal(signal.SIGTERM)
        out, _ = worker.communicate(timeout=60)
        assert (worker.returncode, out.strip()) == (0, "stopped")
    finally:
        if worker.poll() is None:
            worker.kill()
