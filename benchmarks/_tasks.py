"""Running one benchmark agent task to completion, shared by the step benchmarks."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from temporalio.client import Client

from orchestrator.store import Store
from sdk import Agent, Budget, TaskSpec, TaskState, TaskStatus, tool
from sdk.wire.task_run import CURRENT_WORKFLOW_VERSION, TaskRun


@tool
def observe(topic: str) -> str:
    """Return an observation about the topic."""
    return f"observed {topic}"


def topics(tool_steps: int) -> str:
    """An input the simulated engine answers with one tool call per topic, then the answer."""
    return "; ".join(f"t{i}" for i in range(tool_steps))


async def run_task(client: Client, store: Store, agent: Agent, queue: str, tool_steps: int) -> TaskState:
    """Run `agent` over `tool_steps` topics on `queue` (a worker from `build_worker` polls it); its final state."""
    task_id = f"bench-{uuid.uuid4().hex[:10]}"
    spec = TaskSpec(task_id=task_id, agent=agent.name, input=topics(tool_steps), budget=Budget(5_000_000))
    run = TaskRun(
        task_id=task_id,
        spec=spec,
        agent=store.agents.get(agent.name),
        submitted_at=datetime.now(UTC),
        workflow_version=CURRENT_WORKFLOW_VERSION,
    )
    state = await client.execute_workflow("AgentTaskWorkflow", run, id=task_id, task_queue=queue, result_type=TaskState)
    assert state.status == TaskStatus.completed, state.error
    return state
