"""What a task tells the pool about each step: the replica that served the previous one and how much
conversation it held, so the pool can send the step back to the KV cache that has its prefix, and the latency
objectives its submission resolved, so the pool places it where they are met.

Real workflow, real dev server, real engine, store and tool worker; the pool is a stand-in that places
every step on one node, whose queue runs the real LLM step activity, and records what it was asked.
"""

from __future__ import annotations

import itertools
import uuid
from datetime import UTC, datetime

from temporalio.worker import Worker

from activities.llm_step import LlmStepActivities
from activities.step.store_books import StoreStepBooks
from orchestrator.catalogue import ModelCatalogue
from orchestrator.config import BerthConfig
from orchestrator.node.generation import warm_up
from orchestrator.worker import build_worker
from sdk import Budget, LatencyObjectives, TaskSpec, TaskState, TaskStatus
from sdk.wire.lease import LeaseGrant, LeaseRequest, NodeLiveness, Placed, ReleaseLease
from sdk.wire.node_io import node_task_queue
from sdk.wire.task_run import CURRENT_WORKFLOW_VERSION, TaskRun
from tests.workflow.conftest import Harness


class OneNodePool:
    def __init__(self, node: str) -> None:
        self.node, self.ids, self.asked = node, itertools.count(1), list[LeaseRequest]()

    def acquire(self, req: LeaseRequest) -> LeaseGrant:
        self.asked.append(req)
        return Placed(
            lease_id=f"lease-{next(self.ids)}",
            node_id=self.node,
            replica_id=f"{self.node}-r{req.step}",
            gpu_indexes=[0],
            gpu_type="H100-80GB",
            tier="warm",
            decided_by="affinity",
            zone="z1",
            capacity="on-demand",
        )

    def release(self, req: ReleaseLease) -> None:
        pass

    def liveness(self, node_id: str) -> NodeLiveness:
        return NodeLiveness(verdict="alive", detail="the one node of this test")


async def test_each_step_asks_for_the_previous_replica_with_the_conversation_it_held_and_the_objectives(
    berth: Harness,
) -> None:
    warm_up()
    config = BerthConfig(engine_url=berth.engine_url)
    agent = berth.research_agent()
    await berth.serve(agent)
    node, queue = f"gpu-{uuid.uuid4().hex[:8]}", berth.unique("control")
    pool = OneNodePool(node)
    real = LlmStepActivities(
        StoreStepBooks(berth.store.checkpoints, berth.store.tasks, berth.store.events, berth.store.ledger),
        ModelCatalogue(config, berth.store.models),
    )
    task_id = berth.unique("t")
    spec = TaskSpec(
        task_id=task_id, agent=agent.name, input="H100 memory bandwidth; L4 memory bandwidth", budget=Budget(30_000)
    )
    run = TaskRun(
        task_id=task_id,
        spec=spec,
        agent=berth.store.agents.get(agent.name),
        submitted_at=datetime.now(UTC),
        workflow_version=CURRENT_WORKFLOW_VERSION,
        objectives=LatencyObjectives(ttft_s=0.7, tpot_s=0.03, attainment=0.95),
    )
    async with (
        build_worker(berth.client, berth.store, config, task_queue=queue, pool=pool),
        Worker(berth.client, task_queue=node_task_queue(node), activities=[real.generate]),
    ):
        state = await berth.client.execute_workflow(
            "AgentTaskWorkflow", run, id=task_id, task_queue=queue, result_type=TaskState
        )
    assert state.status == TaskStatus.completed and state.step >= 3
    assert {asked.objectives for asked in pool.asked} == {run.objectives}  # every step, as resolved
    assert state.objectives == run.objectives  # and the task's state shows them
    booked = {e.step: e for e in berth.store.ledger.entries(task_id) if e.kind == "settled"}
    first, *later = sorted(pool.asked, key=lambda r: r.step)
    assert (first.previous_replica, first.prompt_tokens) == (None, 0)
    for asked in later:
        before = booked[asked.step - 1]
        assert asked.previous_replica == f"{node}-r{asked.step - 1}"
        assert asked.prompt_tokens == before.prompt_tokens + before.completion_tokens > 0
        assert asked.prompt_tokens <= booked[asked.step].prompt_tokens  # the conversation only grows
