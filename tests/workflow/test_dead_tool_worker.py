"""A tool worker killed (SIGKILL, a real process) before its agent's task calls a tool: Temporal still lists it
among the queue's pollers for minutes, yet the task says it waits for a tool worker, naming the queue, because
the evidence is the queued call no worker took; a new worker takes the call, and the task completes with the
wait cleared."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import textwrap
from datetime import UTC, datetime

from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client

from sdk import Agent, Budget, TaskSpec, TaskState, TaskStatus, tool
from sdk.wire.task_run import CURRENT_WORKFLOW_VERSION, TaskRun
from tests.conftest import ROOT

# The research agent's tools, served by a process of their own so that the test can kill it.
WORKER = textwrap.dedent("""
    import sys
    from sdk import Agent, serve_blocking, tool

    @tool
    def search(query: str) -> str:
        \"\"\"Search the knowledge base.\"\"\"
        return "facts about " + query

    @tool
    def take_note(topic: str) -> str:
        \"\"\"Record a note.\"\"\"
        return "noted " + topic

    serve_blocking(Agent(sys.argv[2], "llama-3.1-8b", "Research carefully.", [search, take_note]),
                   temporal_address=sys.argv[1], register=False)
""")


async def _pollers(client: Client, queue: str) -> list[str]:
    described = await client.workflow_service.describe_task_queue(
        DescribeTaskQueueRequest(
            namespace=client.namespace,
            task_queue=TaskQueue(name=queue),
            task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY,
        )
    )
    return [p.identity for p in described.pollers]


async def test_a_killed_tool_worker_still_listed_by_temporal_leaves_the_task_saying_it_waits_for_one(berth) -> None:
    agent = berth.research_agent()
    queue = agent.spec().task_queue
    worker = subprocess.Popen(
        [sys.executable, "-c", WORKER, berth.client.service_client.config.target_host, agent.name], cwd=ROOT
    )
    try:
        deadline = asyncio.get_running_loop().time() + 60
        while not any(p.startswith(f"{worker.pid}@") for p in await _pollers(berth.client, queue)):
            assert worker.poll() is None and asyncio.get_running_loop().time() < deadline, "the worker never polled"
            await asyncio.sleep(0.2)
    finally:
        worker.send_signal(signal.SIGKILL)
        await asyncio.to_thread(worker.wait, 30)

    berth.store.agents.register(agent.spec())
    task_id = berth.unique("t")
    run = TaskRun(
        task_id=task_id,
        spec=TaskSpec(task_id=task_id, agent=agent.name, input="H100 bandwidth", budget=Budget(20_000)),
        agent=berth.store.agents.get(agent.name),
        submitted_at=datetime.now(UTC),
        workflow_version=CURRENT_WORKFLOW_VERSION,
    )
    handle = await berth.client.start_workflow(
        "AgentTaskWorkflow", run, id=task_id, task_queue=berth.queue, result_type=TaskState
    )
    deadline = asyncio.get_running_loop().time() + 120
    while (record := berth.store.tasks.get(task_id)) is None or not (record.state.waiting_for or "").startswith(
        "a tool worker on "
    ):
        assert asyncio.get_running_loop().time() < deadline, record and record.state
        await asyncio.sleep(0.2)
    assert record.state.status == TaskStatus.running
    assert f"a tool worker on {queue}" in (record.state.waiting_for or "")
    assert [e.data["task_queue"] for e in berth.store.events.of_kind(task_id, "waiting_for_tool_worker")] == [queue]
    # The root cause: Temporal still lists the dead worker as the queue's poller.
    assert any(p.startswith(f"{worker.pid}@") for p in await _pollers(berth.client, queue))

    await berth.serve(agent)  # a worker is back
    state: TaskState = await handle.result()
    assert state.status == TaskStatus.completed and state.waiting_for is None
    assert sorted(name for name, _ in berth.tool_calls) == ["search", "take_note"]


async def test_a_slow_tool_on_a_live_worker_is_not_taken_for_a_missing_worker(berth) -> None:
    """The call outlasts the check (TOOL_WORKER_NOTICE), but a worker took it: no notice, no wait."""
    searched: list[str] = []

    @tool
    async def search(query: str) -> str:
        """Search the knowledge base."""
        searched.append(query)
        await asyncio.sleep(8)
        return "facts about " + query

    agent = Agent(berth.unique("slow"), "llama-3.1-8b", "Research carefully.", [search])
    handle = await berth.start(agent, "H100 bandwidth", 20_000)
    state: TaskState = await handle.result()
    assert state.status == TaskStatus.completed, state.error
    assert searched and berth.store.events.of_kind(state.task_id, "waiting_for_tool_worker") == []
