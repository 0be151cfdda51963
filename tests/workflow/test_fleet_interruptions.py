"""A step cut off on one node resumes on another and continues the text the cut generation wrote.

Real workflow, real dev server, real engine and store. The pool is a small stand-in that places a
step on the first of two nodes it was not told to exclude; node "gpu-a" is a fake whose generation
is cut by a preemption notice after writing the start of the real answer (it reports the text, as
the real activity does), node "gpu-b" runs the real LLM step activity against the engine.
"""

from __future__ import annotations

import itertools
import uuid
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from activities.llm_step import LlmStepActivities
from activities.ports import NODE_STOPPING
from activities.step_books import StoreStepBooks
from activities.tokens import encode
from orchestrator.catalogue import ModelCatalogue
from orchestrator.config import BerthConfig
from orchestrator.node.generation import warm_up
from orchestrator.store import Store
from orchestrator.worker import build_worker
from sdk import Agent, Budget, TaskRun, TaskSpec, TaskState, TaskStatus
from sdk._lease import LeaseGrant, LeaseRequest, ReleaseLease
from sdk._node_io import node_task_queue
from sdk.contracts import LlmStepInput, LlmStepResult

INPUT = "alpha; beta\nlength: 400 tokens"
CUT_CHARS = 600
UNSEEN_TOKENS = 7  # generated after the cut generation's last report: lost


class TwoNodePool:
    """Places every step on the first node it may use; records releases."""

    def __init__(self, nodes: list[str]) -> None:
        self.nodes = nodes
        self.ids = itertools.count(1)
        self.released: list[ReleaseLease] = []
        self.placed: Counter[str] = Counter()
        self.asked: list[LeaseRequest] = []

    def acquire(self, req: LeaseRequest) -> LeaseGrant:
        self.asked.append(req)
        node = next((n for n in self.nodes if n not in req.exclude_nodes), None)
        if node is None:
            return LeaseGrant(outcome="never", reason=f"every node is excluded: {req.exclude_nodes}")
        self.placed[node] += 1
        spot = node == self.nodes[0]  # the first node is spot capacity, in zone z1
        return LeaseGrant(outcome="placed", lease_id=f"lease-{next(self.ids)}", node_id=node, replica_id=f"{node}-r1",
                          gpu_indexes=[0], gpu_type="H100-80GB", tier="warm", decided_by="locality",
                          zone="z1" if spot else "z2", capacity="spot" if spot else "on-demand")

    def release(self, req: ReleaseLease) -> None:
        self.released.append(req)


class PreemptedNode:
    """A node whose generation is cut by a notice after writing `answer[:CUT_CHARS]`."""

    def __init__(self, answer: str) -> None:
        self.prefix = answer[:CUT_CHARS]
        self.calls = 0

    @activity.defn(name="berth.generate")
    async def generate(self, inp: LlmStepInput) -> LlmStepResult:
        self.calls += 1
        written = len(encode(self.prefix))
        details = {"attempt": inp.attempt_base + 1, "generated": written + UNSEEN_TOKENS, "response_id": "chatcmpl-cut",
                   "lost_before": 0, "kept_before": 0, "unresolved": [], "prefix": self.prefix,
                   "prefix_tokens": written, "prefix_own": written}
        raise ApplicationError("the worker shut down mid-generation", details, type=NODE_STOPPING)


async def test_a_step_preempted_mid_answer_continues_its_text_on_another_node(
        temporal_client: Client, engine_url: str, tmp_path: Path) -> None:
    warm_up()  # as a node does before it joins: litellm's import would stall the first generation's heartbeats
    config = BerthConfig(data_dir=tmp_path, engine_url=engine_url, database_url=f"sqlite:///{tmp_path}/berth.db")
    store = Store.open(config.resolved_database_url)
    agent = Agent(f"writer-{uuid.uuid4().hex[:8]}", "llama-3.1-8b", "Write at length.", [], max_tokens_per_step=2048)
    store.agents.register(agent.spec())
    tag = uuid.uuid4().hex[:8]
    node_a, node_b, queue = f"gpu-a-{tag}", f"gpu-b-{tag}", f"control-{tag}"
    real = LlmStepActivities(StoreStepBooks(store.checkpoints, store.tasks, store.events, store.ledger),
                             ModelCatalogue(config, store.models))

    async def run(task_id: str, pool: TwoNodePool, cutter: PreemptedNode | None) -> TaskState:
        spec = TaskSpec(task_id=task_id, agent=agent.name, input=INPUT, budget=Budget(50_000))
        task = TaskRun(task_id=task_id, spec=spec, agent=store.agents.get(agent.name),
                       submitted_at=datetime.now(timezone.utc))
        workers = [build_worker(temporal_client, store, config, task_queue=queue, pool=pool),
                   Worker(temporal_client, task_queue=node_task_queue(node_b), activities=[real.generate])]
        if cutter is not None:
            workers.append(Worker(temporal_client, task_queue=node_task_queue(node_a), activities=[cutter.generate]))
        async with workers[0], workers[1]:
            if cutter is None:
                return await temporal_client.execute_workflow("AgentTaskWorkflow", task, id=task_id, task_queue=queue,
                                                              result_type=TaskState)
            async with workers[2]:
                return await temporal_client.execute_workflow("AgentTaskWorkflow", task, id=task_id, task_queue=queue,
                                                              result_type=TaskState)

    uncut = await run(f"uncut-{tag}", TwoNodePool([node_b]), None)
    assert uncut.status == TaskStatus.completed and uncut.result and len(uncut.result) > 1200

    pool, cutter = TwoNodePool([node_a, node_b]), PreemptedNode(uncut.result)
    state = await run(f"cut-{tag}", pool, cutter)
    assert state.status == TaskStatus.completed, state.error
    assert state.result == uncut.result  # the same answer, its start written on the preempted node
    assert cutter.calls == 1 and pool.placed == {node_a: 1, node_b: 1}
    # Placed again away from the preempted node, and from its zone's spot capacity.
    assert (pool.asked[-1].exclude_nodes, pool.asked[-1].avoid_spot_zones) == ([node_a], ["z1"])
    assert state.interruptions == 1 and state.spend.tokens_used <= 50_000

    # While the step was placed again its task said why it was not running: a preemption, not a shortage.
    troubles = [(e.data["status"], e.data.get("gpu_trouble")) for e in store.events.read(state.task_id)
                if e.kind == "state"]
    assert ("waiting_for_gpu", "preemption") in troubles and ("running", None) in troubles[-3:]
    kept = len(encode(cutter.prefix))
    [cut] = [e.data for e in store.events.read(state.task_id) if e.kind == "interruption"]
    assert (cut["kind"], cut["node_id"], cut["resumed_on"]) == ("notice", node_a, node_b)
    assert (cut["tokens_kept"], cut["tokens_lost"]) == (kept, UNSEEN_TOKENS)
    totals = store.ledger.totals(state.task_id)
    assert (totals.kept_tokens, totals.lost_tokens) == (kept, UNSEEN_TOKENS)
    assert totals.tokens == state.spend.tokens_used  # the budget charged what the ledger booked, kept included
    # Only the rest of the answer was generated on gpu-b (the kept text was its prompt, not its output).
    assert abs(totals.completion_tokens + kept - store.ledger.totals(uncut.task_id).completion_tokens) <= 2
    # The cut node's lease was released as gone, the serving one as warm.
    assert [(r.replica_warm, r.replica_gone) for r in pool.released] == [(False, True), (True, False)]
