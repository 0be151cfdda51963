"""Cancel means stop: a running generation is cut and what it wrote is booked; a tool no worker runs is not
waited for.

Real workflow, real dev server, real SQLite store, and a real simulated-engine process streaming at a real
model's pace (40 tokens/s), so a long answer is still being written when the cancel arrives.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from temporalio.client import Client, WorkflowHandle

from orchestrator.config import BerthConfig
from orchestrator.store import Store
from orchestrator.worker import build_worker
from sdk import Agent, Budget, TaskSpec, TaskState, TaskStatus, tool
from sdk.wire.contracts import CancelRequest, GenerationProgress
from sdk.wire.task_run import CURRENT_WORKFLOW_VERSION, TaskRun
from tests.conftest import ROOT, free_port, wait_http

ANSWER_TOKENS = 2000  # 50 s at 40 tokens/s: it cannot have finished when the cancel lands
DEADLINE_S = 120  # generous: a busy machine is slow, and the test waits for states, not seconds


@contextlib.asynccontextmanager
async def slow_engine(log_dir: Path) -> AsyncIterator[str]:
    port = free_port()
    with open(log_dir / "slow-engine.log", "wb") as log:
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
                "1",
                "--model",
                "llama-3.1-8b:0.05:40",
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


@pytest.fixture
async def slow_stack(temporal_client: Client, tmp_path: Path) -> AsyncIterator[tuple[Store, str, str]]:
    async with slow_engine(tmp_path) as engine_url:
        config = BerthConfig(data_dir=tmp_path, engine_url=engine_url, database_url=f"sqlite:///{tmp_path}/berth.db")
        store = Store.open(config.resolved_database_url)
        queue = f"control-{uuid.uuid4().hex[:8]}"
        async with build_worker(temporal_client, store, config, task_queue=queue):
            yield store, queue, engine_url


async def _start(client: Client, store: Store, queue: str, agent: Agent, text: str) -> WorkflowHandle:
    spec = store.agents.register(agent.spec())
    task_id = f"t-{uuid.uuid4().hex[:8]}"
    run = TaskRun(
        task_id=task_id,
        spec=TaskSpec(task_id=task_id, agent=agent.name, input=text, budget=Budget(50_000)),
        agent=spec,
        submitted_at=datetime.now(UTC),
        workflow_version=CURRENT_WORKFLOW_VERSION,
    )
    return await client.start_workflow("AgentTaskWorkflow", run, id=task_id, task_queue=queue, result_type=TaskState)


async def _until(check, what: str) -> object:  # noqa: ANN001 - a coroutine function returning a value or None
    for _ in range(DEADLINE_S * 10):
        found = await check()
        if found:
            return found
        await asyncio.sleep(0.1)
    raise AssertionError(f"never saw {what}")


async def _generated(handle: WorkflowHandle) -> int:
    """Tokens the running generation's last heartbeat reported (0 before it streams)."""
    described = await handle.describe()
    for pending in described.raw_description.pending_activities:
        if pending.activity_type.name == "berth.generate" and pending.heartbeat_details.payloads:
            return GenerationProgress.model_validate_json(pending.heartbeat_details.payloads[0].data).generated
    return 0


async def test_a_cancel_cuts_the_running_generation_and_books_what_it_wrote(
    temporal_client: Client, slow_stack: tuple[Store, str, str]
) -> None:
    store, queue, engine_url = slow_stack
    agent = Agent(
        f"writer-{uuid.uuid4().hex[:6]}", "llama-3.1-8b", "Write at length.", [], max_tokens_per_step=ANSWER_TOKENS
    )
    handle = await _start(temporal_client, store, queue, agent, f"length: {ANSWER_TOKENS} tokens")
    await _until(lambda: _generated(handle), "the generation streaming")
    await handle.signal("cancel", CancelRequest(reason="the author changed their mind"))
    state = await handle.result()

    assert state.status == TaskStatus.cancelled and state.error == "the author changed their mind"
    totals = store.ledger.totals(state.task_id)
    # Cut, not completed: what it wrote is booked as lost, and the budget was charged exactly the books.
    assert totals.calls == 0 and 0 < totals.lost_tokens < ANSWER_TOKENS
    assert state.spend.tokens_used == totals.tokens

    async def journaled() -> dict | None:  # the engine journals a generation once it notices the client left
        async with httpx.AsyncClient() as http:
            usage = (await http.get(engine_url.removesuffix("/v1") + "/sim/usage")).json()["by_task"]
        return usage.get(state.task_id) if usage.get(state.task_id, {}).get("aborted_requests") else None

    served = await _until(journaled, "the engine journal the cut generation")
    # The engine stopped when the step left (it journals what it wrote): far short of the whole answer, and no
    # more than the heartbeats had reported (the last half-second of tokens may be missing from the books).
    assert served["completion_tokens"] == 0 and served["aborted_completion_tokens"] < ANSWER_TOKENS
    assert totals.lost_tokens <= served["aborted_completion_tokens"]


async def test_a_cancel_does_not_wait_for_a_tool_no_worker_runs(
    temporal_client: Client, slow_stack: tuple[Store, str, str]
) -> None:
    store, queue, _ = slow_stack

    @tool
    def search(query: str) -> str:
        """Search the knowledge base."""
        return "never runs: no worker serves this agent's queue"

    agent = Agent(f"orphan-{uuid.uuid4().hex[:6]}", "llama-3.1-8b", "Research carefully.", [search])
    handle = await _start(temporal_client, store, queue, agent, "H100 bandwidth")

    async def waiting_for_the_tool() -> bool:
        described = await handle.describe()
        return any(p.activity_type.name == "berth.run_tool" for p in described.raw_description.pending_activities)

    await _until(waiting_for_the_tool, "the task waiting for its tool")
    await handle.signal("cancel", CancelRequest(reason="stop"))
    state = await handle.result()
    assert state.status == TaskStatus.cancelled and state.error == "stop"


async def test_a_cancel_that_crosses_a_sub_agents_end_still_ends_the_parent_cancelled(
    temporal_client: Client, engine_url: str, tmp_path: Path
) -> None:
    """The parent hears of its cancel and of one child's end in one workflow task: the cancel handler runs first and
    signals a child that is no longer there, while the other child keeps the parent open until the answer comes
    back. That answer must not fail the parent (its row would stay open forever and the carves stay reserved): the
    parent ends cancelled, with both children settled."""
    from sdk.wire.builtins import SpawnAgentArgs
    from sdk.wire.contracts import SpawnedChild

    config = BerthConfig(data_dir=tmp_path, engine_url=engine_url, database_url=f"sqlite:///{tmp_path}/berth.db")
    store = Store.open(config.resolved_database_url)
    queue = f"control-{uuid.uuid4().hex[:8]}"
    asker = Agent(f"asker-{uuid.uuid4().hex[:6]}", "llama-3.2-1b", "Ask, then answer.", allow_ask_human=True)
    async with build_worker(temporal_client, store, config, task_queue=queue):
        parent = await _start(temporal_client, store, queue, asker, "ask: ready?")
        await _until(lambda: _status_is(store, parent.id, TaskStatus.awaiting_input), "the parent asking")
        children = [
            await parent.execute_update(
                "spawn", SpawnAgentArgs(agent=asker.name, input="ask: deep?", tokens=2000), result_type=SpawnedChild
            )
            for _ in range(2)
        ]
        for child in children:
            await _until(
                lambda child=child: _status_is(store, child.task_id, TaskStatus.awaiting_input), "a child asking"
            )
    # No worker runs now: the first child's end and the parent's cancel reach the parent in one workflow task.
    await temporal_client.get_workflow_handle(children[0].task_id).terminate("its node burned down")
    await parent.signal("cancel", CancelRequest(reason="enough"))
    async with build_worker(temporal_client, store, config, task_queue=queue):
        state = await parent.result()
    store.close()

    assert state.status == TaskStatus.cancelled and state.error == "enough"
    # A child that ended without an answer spent an unknown part of its carve: all of it is charged, none reserved.
    assert state.spend.reserved_for_children == 0 and state.spend.tokens_used >= 2000
    assert store.tasks.get(children[1].task_id).state.status == TaskStatus.cancelled


async def _status_is(store: Store, task_id: str, status: TaskStatus) -> bool:
    record = store.tasks.get(task_id)
    return record is not None and record.state.status == status
