"""A bench for fleet tests on the real workflow: a stand-in pool, one real node, and nodes that misbehave.

The pool places a step on the first of its nodes the step was not told to exclude. The real node runs
the real LLM step against the simulated engine. The others: a node whose generation a preemption cuts
(it reports the start of the real answer, as the real activity does when its worker is told to stop),
a node that answers without booking its call, one that stalls and never lets go, one whose first
generation goes quiet (a starved process) while the node stays alive, and one that goes quiet and then dies.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from temporalio import activity
from temporalio.client import Client, WorkflowHandle
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from activities.llm_step import LlmStepActivities
from activities.step.store_books import StoreStepBooks
from activities.step.tokens import encode
from orchestrator.catalogue import ModelCatalogue
from orchestrator.config import BerthConfig
from orchestrator.node.generation import warm_up
from orchestrator.store import Store
from orchestrator.worker import build_worker
from sdk import Agent, Budget, Message, TaskSpec, TaskState
from sdk.wire.contracts import NODE_STOPPING, LlmStepInput, LlmStepResult, Reply
from sdk.wire.lease import LeaseGrant, LeaseRequest, Never, NodeLiveness, Placed, ReleaseLease
from sdk.wire.node_io import node_task_queue
from sdk.wire.task_run import CURRENT_WORKFLOW_VERSION, TaskRun

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
            return Never(reason=f"every node is excluded: {req.exclude_nodes}")
        self.placed[node] += 1
        spot = node == self.nodes[0]  # the first node is spot capacity, in zone z1
        return Placed(
            lease_id=f"lease-{next(self.ids)}",
            node_id=node,
            replica_id=f"{node}-r1",
            gpu_indexes=[0],
            gpu_type="H100-80GB",
            tier="warm",
            decided_by="locality",
            zone="z1" if spot else "z2",
            capacity="spot" if spot else "on-demand",
        )

    def release(self, req: ReleaseLease) -> None:
        self.released.append(req)

    def liveness(self, node_id: str) -> NodeLiveness:
        return NodeLiveness(verdict="gone", detail=f"{node_id} is a fake that never comes back")


class BusyNodesPool(TwoNodePool):
    """Nodes whose processes are provably alive (as a port that accepts connections shows), however slow."""

    def liveness(self, node_id: str) -> NodeLiveness:
        return NodeLiveness(verdict="alive", detail=f"{node_id} accepts connections")


class DyingPool(BusyNodesPool):
    """Its nodes are alive when first asked about, gone from then on: a node that dies while a step waits on it."""

    def __init__(self, nodes: list[str]) -> None:
        super().__init__(nodes)
        self.asked_about: Counter[str] = Counter()

    def liveness(self, node_id: str) -> NodeLiveness:
        self.asked_about[node_id] += 1
        if self.asked_about[node_id] == 1:
            return super().liveness(node_id)
        return NodeLiveness(verdict="gone", detail=f"{node_id} refuses connections")


class PreemptedNode:
    """A node whose generation is cut by a notice after writing `answer[:CUT_CHARS]`."""

    def __init__(self, answer: str) -> None:
        self.prefix = answer[:CUT_CHARS]
        self.calls = 0

    @activity.defn(name="berth.generate")
    async def generate(self, inp: LlmStepInput) -> LlmStepResult:
        self.calls += 1
        written = len(encode(self.prefix))
        details = {
            "attempt": inp.attempt_base + 1,
            "generated": written + UNSEEN_TOKENS,
            "response_id": "chatcmpl-cut",
            "lost_before": 0,
            "kept_before": 0,
            "unresolved": [],
            "prefix": self.prefix,
            "prefix_tokens": written,
            "prefix_own": written,
        }
        raise ApplicationError("the worker shut down mid-generation", details, type=NODE_STOPPING)


class LyingNode:
    """A node that answers without booking its call, claiming whatever usage it likes."""

    def __init__(self, completion_tokens: int) -> None:
        self.completion_tokens = completion_tokens
        self.calls = 0

    @activity.defn(name="berth.generate")
    async def generate(self, inp: LlmStepInput) -> LlmStepResult:
        self.calls += 1
        return Reply(
            message=Message(role="assistant", content="forged answer"),
            finish_reason="stop",
            prompt_tokens=0,
            completion_tokens=self.completion_tokens,
            attempt=inp.attempt_base + 1,
            checkpoint=inp.checkpoint,
            placement=inp.placement,
        )


class StalledNode:
    """A node that takes the call and then only heartbeats, never answering, not even a cancellation, until the
    test lets it go (a worker cannot shut down while one of its activities runs)."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.released = asyncio.Event()

    @activity.defn(name="berth.generate")
    async def generate(self, inp: LlmStepInput) -> LlmStepResult:
        self.started.set()
        while not self.released.is_set():
            activity.heartbeat({"attempt": inp.attempt_base + 1, "generated": 0})
            try:
                await asyncio.wait_for(self.released.wait(), timeout=0.5)
            except (TimeoutError, asyncio.CancelledError):
                pass  # it does not let go of the step
        raise ApplicationError("let go at the end of the test")


class QuietOnceNode:
    """A live node whose first generation writes the start of `answer`, beats it once, then falls silent (its
    process starved, as on a busy machine); every later call is the real LLM step (`real`)."""

    def __init__(self, answer: str, real: LlmStepActivities) -> None:
        self.prefix = answer[:CUT_CHARS]
        self.real = real
        self.calls: list[LlmStepInput] = []

    @activity.defn(name="berth.generate")
    async def generate(self, inp: LlmStepInput) -> LlmStepResult:
        self.calls.append(inp)
        if len(self.calls) > 1:
            return await self.real.generate(inp)
        written = len(encode(self.prefix))
        activity.heartbeat(
            {
                "attempt": inp.attempt_base + 1,
                "generated": written + UNSEEN_TOKENS,
                "response_id": "chatcmpl-quiet",
                "lost_before": 0,
                "kept_before": 0,
                "unresolved": [],
                "prefix": self.prefix,
                "prefix_tokens": written,
                "prefix_own": written,
            }
        )
        await asyncio.sleep(120)  # silent: cut by Temporal's heartbeat timeout, cancelled at the worker's shutdown
        raise ApplicationError("a quiet generation was never meant to answer")


class QuietThenDeadNode(QuietOnceNode):
    """A node whose first generation goes quiet, like QuietOnceNode's, and which then dies: the continuation it is
    given never reports anything (the process that took it is gone before its first beat)."""

    @activity.defn(name="berth.generate")
    async def generate(self, inp: LlmStepInput) -> LlmStepResult:
        if self.calls:
            self.calls.append(inp)
            await asyncio.sleep(120)  # dead: cut by Temporal's heartbeat timeout, cancelled at the worker's shutdown
            raise ApplicationError("a dead node's generation was never meant to answer")
        return await super().generate(inp)


@dataclass
class FleetBench:
    """A control worker over a stand-in pool, and a real node (`real_node`) running the real LLM step against the
    simulated engine; other nodes are the fakes a test brings."""

    client: Client
    store: Store
    config: BerthConfig
    agent: Agent
    tag: str = field(default_factory=lambda: uuid.uuid4().hex[:8])

    @property
    def queue(self) -> str:
        return f"control-{self.tag}"

    def node(self, name: str) -> str:
        return f"{name}-{self.tag}"

    @property
    def real_node(self) -> str:
        return self.node("gpu-b")

    def real_generation(self) -> LlmStepActivities:
        """The real LLM step against the simulated engine, booking in the bench's store."""
        return LlmStepActivities(
            StoreStepBooks(self.store.checkpoints, self.store.tasks, self.store.events, self.store.ledger),
            ModelCatalogue(self.config, self.store.models),
        )

    def real_node_worker(self) -> Worker:
        """The real node's worker: the real LLM step against the simulated engine."""
        return Worker(
            self.client, task_queue=node_task_queue(self.real_node), activities=[self.real_generation().generate]
        )

    @asynccontextmanager
    async def workers(self, pool: TwoNodePool, fakes: dict[str, object], real_node: bool = True) -> AsyncIterator[None]:
        async with contextlib.AsyncExitStack() as running:
            await running.enter_async_context(
                build_worker(self.client, self.store, self.config, task_queue=self.queue, pool=pool)
            )
            if real_node:
                await running.enter_async_context(self.real_node_worker())
            for node, fake in fakes.items():
                await running.enter_async_context(
                    Worker(self.client, task_queue=node_task_queue(node), activities=[fake.generate])
                )  # type: ignore[attr-defined]
            yield

    async def start(self, task_id: str, tokens: int, grace_s: float = 3600) -> WorkflowHandle:
        spec = TaskSpec(task_id=task_id, agent=self.agent.name, input=INPUT, budget=Budget(tokens))
        task = TaskRun(
            task_id=task_id,
            spec=spec,
            agent=self.store.agents.get(self.agent.name),
            submitted_at=datetime.now(UTC),
            workflow_version=CURRENT_WORKFLOW_VERSION,
            budget_grace_s=grace_s,
        )
        return await self.client.start_workflow(
            "AgentTaskWorkflow", task, id=task_id, task_queue=self.queue, result_type=TaskState
        )

    async def run(
        self, task_id: str, tokens: int, pool: TwoNodePool, fakes: dict[str, object], grace_s: float = 3600
    ) -> TaskState:
        async with self.workers(pool, fakes):
            return await (await self.start(task_id, tokens, grace_s)).result()


@asynccontextmanager
async def fleet_bench(client: Client, engine_url: str, tmp_path: Path) -> AsyncIterator[FleetBench]:
    warm_up()  # as a node does before it joins: litellm's import would stall the first generation's heartbeats
    config = BerthConfig(data_dir=tmp_path, engine_url=engine_url, database_url=f"sqlite:///{tmp_path}/berth.db")
    store = Store.open(config.resolved_database_url)
    agent = Agent(f"writer-{uuid.uuid4().hex[:8]}", "llama-3.1-8b", "Write at length.", [], max_tokens_per_step=2048)
    store.agents.register(agent.spec())
    try:
        yield FleetBench(client, store, config, agent)
    finally:
        store.close()
