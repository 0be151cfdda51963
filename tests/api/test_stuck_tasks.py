"""A wedged task is never silent: against a real Temporal dev server and the control plane served by uvicorn (its
lifespan running the reconciler, as `berth server` does).

The workflow is made to really wedge: a worker registers a workflow under AgentTaskWorkflow's name whose code raises
an ordinary exception, which Temporal answers by retrying the workflow task without end (as it does after a
nondeterminism error). The task's row, the API, the CLI, the admin UI, MCP and /metrics then all say it is stuck,
with Temporal's error; a fixed worker lets the workflow task succeed again and the mark goes. A workflow that
continued as new and then wedged is found on its latest run; one terminated in Temporal ends its row `failed`,
saying who ended it and why, and one that failed there ends it with the failure.

Every wait is a bounded poll for a state the control plane writes, never a sleep and an assertion.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from datetime import UTC, datetime
from html import unescape
from pathlib import Path
from typing import TypeVar

import httpx
import httpx2
import pytest
import uvicorn
from api_helpers import unique
from mcp import Client as McpClient
from mcp.client.streamable_http import streamable_http_client
from prometheus_client.parser import text_string_to_metric_families
from temporalio import workflow
from temporalio.client import Client as TemporalClient
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker
from ui_helpers import csrf_of

from orchestrator.api import TemporalGateway
from orchestrator.cli.main import main
from orchestrator.config import BerthConfig
from orchestrator.reconcile import FAILING_EVENT, RECOVERED_EVENT
from orchestrator.server import create_app
from orchestrator.store import Store
from sdk import AgentSpec, Budget, Client, TaskState, TaskStatus
from sdk.wire.contracts import WORKFLOW_NAME
from sdk.wire.identity import Role
from sdk.wire.task_run import TaskRun

BUG = "the step loop hit a bug: KeyError 'plan'"
# Each poll gives Temporal's retries (a workflow task that times out takes 10 s) and the reconciler (every 0.5 s
# here) ample time on a busy machine; a state that never comes fails the test at the bound.
WAIT_S = 120.0
T = TypeVar("T")


@workflow.defn(name=WORKFLOW_NAME, sandboxed=False)
class BuggyTask:
    """AgentTaskWorkflow as a worker with a bug in it runs it: its workflow task raises on every attempt."""

    @workflow.run
    async def run(self, run: TaskRun) -> TaskState:
        raise RuntimeError(BUG)


@workflow.defn(name=WORKFLOW_NAME, sandboxed=False)
class FixedTask:
    """The fix deployed: its workflow task completes, and the task waits (as one waiting for a GPU would)."""

    @workflow.run
    async def run(self, run: TaskRun) -> TaskState:
        await workflow.wait_condition(lambda: False)
        raise AssertionError("never reached")


@workflow.defn(name=WORKFLOW_NAME, sandboxed=False)
class ContinuedThenBuggy:
    """A long task continues as new (same workflow id, a new run), and its new run's code has the bug."""

    @workflow.run
    async def run(self, run: TaskRun) -> TaskState:
        if run.resume_from is None and workflow.info().continued_run_id is None:
            workflow.continue_as_new(run)
        raise RuntimeError(f"after continue-as-new: {BUG}")


@workflow.defn(name=WORKFLOW_NAME, sandboxed=False)
class FailedTask:
    """A workflow that fails as a whole (an ApplicationError), before Berth's own ending could write its state."""

    @workflow.run
    async def run(self, run: TaskRun) -> TaskState:
        raise ApplicationError("the plan could not be read", non_retryable=True)


@dataclass
class Server:
    url: str
    store: Store
    key: str
    queue: str
    agent: AgentSpec
    temporal: TemporalClient

    def sdk(self) -> Client:
        return Client(self.url, api_key=self.key)

    async def http(self, path: str) -> httpx.Response:
        async with httpx.AsyncClient(base_url=self.url, headers={"authorization": f"Bearer {self.key}"}) as http:
            return await http.get(path)

    async def berth(self, capsys: pytest.CaptureFixture[str], *argv: str) -> str:
        """`berth …` against this server (in a thread: the CLI runs its own event loop); what it printed."""
        capsys.readouterr()
        code = await asyncio.to_thread(main, [*argv, "--api", self.url, "--api-key", self.key])
        out = capsys.readouterr().out
        assert code == 0, out
        return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
async def server(temporal_env: WorkflowEnvironment, tmp_path: Path) -> AsyncIterator[Server]:
    """The control plane, served as `berth server` serves it (lifespan and reconciler running), on a task queue of
    its own. Made per test: the app's task gauges read the store of the app made last in the process."""
    config = BerthConfig(data_dir=tmp_path, database_url=f"sqlite:///{tmp_path}/berth.db", reconcile_every_s=0.5)
    store = Store.open(config.resolved_database_url)
    queue = f"control-{uuid.uuid4().hex[:8]}"
    temporal = temporal_env.client
    # The gateway connects from the server's own event loop (lazily), not from the tests' loop.
    gateway = TemporalGateway(temporal.service_client.config.target_host, temporal.namespace, task_queue=queue)
    port = _free_port()
    served = uvicorn.Server(
        uvicorn.Config(create_app(config, store, gateway), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=served.run, name="berth-api-under-test", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not served.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the API server did not start"
        await asyncio.sleep(0.05)
    agent = store.agents.register(AgentSpec(name=unique("clerk"), model="llama-3.1-8b", max_steps=5))
    try:
        yield Server(f"http://127.0.0.1:{port}", store, store.keys.create(Role.admin).key, queue, agent, temporal)
    finally:
        served.should_exit = True
        await asyncio.to_thread(thread.join, 30)
        for state in store.tasks.list(limit=500):
            try:
                await temporal.get_workflow_handle(state.task_id).terminate("stuck-task test over")
            except RPCError:
                pass
        store.close()


async def until(what: str, read: Callable[[], Awaitable[T | None]]) -> T:
    """Poll `read` until it gives something, for at most WAIT_S."""
    deadline = time.monotonic() + WAIT_S
    while True:
        found = await read()
        if found is not None:
            return found
        assert time.monotonic() < deadline, f"waited {WAIT_S:g} s for {what}"
        await asyncio.sleep(0.1)


def stored(server: Server, task_id: str) -> TaskState:
    record = server.store.tasks.get(task_id)
    assert record is not None
    return record.state


async def metric(server: Server, family: str, sample: str, **labels: str) -> float | None:
    scraped = await server.http("/metrics")
    assert scraped.status_code == 200, scraped.text[:300]
    for found in text_string_to_metric_families(scraped.text):
        if found.name == family:
            for s in found.samples:
                if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items()):
                    return s.value
    return None


async def signed_in_page(server: Server, path: str) -> str:
    async with httpx.AsyncClient(base_url=server.url) as browser:
        form = await browser.get("/login")
        signed = await browser.post("/login", data={"api_key": server.key, "csrf_token": csrf_of(form)})
        assert signed.status_code == 303, signed.text[:300]
        page = await browser.get(path)
        assert page.status_code == 200, page.text[:300]
        return unescape(page.text)


async def test_a_task_whose_workflow_task_keeps_failing_says_so_everywhere_until_it_runs_again(
    server: Server, capsys: pytest.CaptureFixture[str]
) -> None:
    cause = "workflow_worker_unhandled_failure"
    failures_before = await metric(
        server, "berth_workflow_task_failures", "berth_workflow_task_failures_total", cause=cause
    )
    async with AsyncExitStack() as workers:
        await workers.enter_async_context(Worker(server.temporal, task_queue=server.queue, workflows=[BuggyTask]))
        async with server.sdk() as berth:
            task = await berth.submit(server.agent.name, "File the report.", Budget(tokens=5000))

            async def marked() -> TaskState | None:
                state = stored(server, task.task_id)
                return state if state.stuck is not None else None

            state = await until("the task to be marked stuck", marked)
            # The row: its status as it was (its workflow never ran a step), and Temporal's own error.
            assert state.status == TaskStatus.queued and state.stuck is not None
            stuck = state.stuck
            assert BUG in stuck.error and stuck.cause == cause and stuck.failures >= 1
            assert stuck.since <= datetime.now(UTC)
            [began] = server.store.events.of_kind(task.task_id, FAILING_EVENT)
            assert BUG in began.data["error"]

            # The API (and so the SDK) answers with the stored state: the workflow's code cannot answer a query.
            assert (await task.status()).stuck is not None and BUG in (await task.status()).stuck.error
            listed = {t.task_id: t for t in await berth.tasks()}
            assert listed[task.task_id].stuck is not None

        # The CLI.
        shown = await server.berth(capsys, "tasks", "show", task.task_id)
        assert "queued stuck" in shown
        assert "its workflow task has failed" in shown and BUG in shown and "Stuck tasks" in shown
        listed_line = next(
            line for line in (await server.berth(capsys, "tasks", "list")).splitlines() if task.task_id in line
        )
        assert "queued stuck" in listed_line

        # The admin UI: the task's page and the task list.
        page = await signed_in_page(server, f"/tasks/{task.task_id}")
        assert 'id="stuck"' in page and "stuck: its workflow task has failed" in page and BUG in page
        assert 'class="badge stuck"' in await signed_in_page(server, "/tasks")

        # MCP, as an assistant or IDE agent sees it.
        async with (
            httpx2.AsyncClient(headers={"authorization": f"Bearer {server.key}"}, timeout=30) as http,
            McpClient(streamable_http_client(f"{server.url}/mcp", http_client=http)) as mcp,
        ):
            answer = await mcp.call_tool("get_task", {"task_id": task.task_id})
            assert not answer.is_error and BUG in answer.structured_content["stuck"]["error"]
            assert answer.structured_content["stuck"]["failures"] >= 1

        # /metrics: the gauge of tasks stuck now, and the failures seen, each counted once.
        assert await metric(server, "berth_tasks_stuck", "berth_tasks_stuck", tenant="default") == 1
        failures_now = await metric(
            server, "berth_workflow_task_failures", "berth_workflow_task_failures_total", cause=cause
        )
        seen = (failures_now or 0) - (failures_before or 0)
        assert 1 <= seen <= stored(server, task.task_id).stuck.failures

        # The fix is deployed: the next attempt of the workflow task succeeds, and the mark goes.
        await workers.aclose()
        await workers.enter_async_context(Worker(server.temporal, task_queue=server.queue, workflows=[FixedTask]))

        async def cleared() -> TaskState | None:
            state = stored(server, task.task_id)
            return state if state.stuck is None else None

        state = await until("the stuck mark to be cleared", cleared)
        assert state.status == TaskStatus.queued
        [recovered] = server.store.events.of_kind(task.task_id, RECOVERED_EVENT)
        assert recovered.data["failures"] >= 1
        assert await metric(server, "berth_tasks_stuck", "berth_tasks_stuck", tenant="default") in (None, 0)
        assert "stuck" not in await server.berth(capsys, "tasks", "show", task.task_id)


async def test_a_workflow_that_continued_as_new_is_found_stuck_on_its_latest_run(server: Server) -> None:
    async with Worker(server.temporal, task_queue=server.queue, workflows=[ContinuedThenBuggy]):
        async with server.sdk() as berth:
            task = await berth.submit(server.agent.name, "A long report.", Budget(tokens=5000))

        async def marked() -> TaskState | None:
            state = stored(server, task.task_id)
            return state if state.stuck is not None else None

        stuck = (await until("the task to be marked stuck", marked)).stuck
        assert stuck is not None and f"after continue-as-new: {BUG}" in stuck.error
        described = await server.temporal.get_workflow_handle(task.task_id).describe()
        assert described.raw_description.workflow_execution_info.first_run_id != described.run_id  # a second run


async def test_a_workflow_terminated_in_temporal_ends_its_row_failed_with_who_and_why(
    server: Server, capsys: pytest.CaptureFixture[str]
) -> None:
    ended_before = await metric(
        server, "berth_tasks_ended_in_temporal", "berth_tasks_ended_in_temporal_total", how="terminated"
    )
    async with Worker(server.temporal, task_queue=server.queue, workflows=[FixedTask]):
        async with server.sdk() as berth:
            task = await berth.submit(server.agent.name, "File the report.", Budget(tokens=5000))
            await server.temporal.get_workflow_handle(task.task_id).terminate(reason="rolled back by ops")

            async def ended() -> TaskState | None:
                state = stored(server, task.task_id)
                return state if state.status.is_final else None

            state = await until("the row to end", ended)
            why = f"its workflow was terminated in Temporal by {server.temporal.identity}: rolled back by ops"
            assert state.status == TaskStatus.failed and state.error == why
            last = server.store.events.read(task.task_id)[-1]
            assert (
                last.kind == "state"
                and last.data["status"] == "failed"
                and last.data["ended_in_temporal"] == "terminated"
            )
            assert (await task.status()).error == why

    assert why in await server.berth(capsys, "tasks", "show", task.task_id)
    ended_now = await metric(
        server, "berth_tasks_ended_in_temporal", "berth_tasks_ended_in_temporal_total", how="terminated"
    )
    assert (ended_now or 0) - (ended_before or 0) == 1


async def test_a_workflow_that_failed_in_temporal_ends_its_row_failed_with_the_failure(server: Server) -> None:
    async with Worker(server.temporal, task_queue=server.queue, workflows=[FailedTask]):
        async with server.sdk() as berth:
            task = await berth.submit(server.agent.name, "File the report.", Budget(tokens=5000))

            async def ended() -> TaskState | None:
                state = stored(server, task.task_id)
                return state if state.status.is_final else None

            state = await until("the row to end", ended)
            assert state.status == TaskStatus.failed
            assert state.error == "its workflow failed in Temporal: the plan could not be read"
