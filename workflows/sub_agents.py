"""Sub-agents of a task: carve their budgets, run them as child workflows, settle their spend.

A child's whole budget is set aside from the parent's remainder when it starts and only
what it really used is charged when it ends, so the tree obeys used ≤ limit however its
members interleave. Children run with no budget grace: a child out of tokens ends at once
and hands its partial answer back instead of stalling its parent.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass

from temporalio import workflow
from temporalio.exceptions import ApplicationError, ChildWorkflowError

with workflow.unsafe.imports_passed_through():
    from activities.bookkeeping import TaskBookkeeping
    from pydantic import ValidationError
    from sdk import TaskRun, TaskState
    from sdk._builtins import SpawnAgentArgs
    from sdk._limits import MIN_ANSWER_TOKENS
    from sdk._spec import AgentSpec, TaskSpec
    from sdk.contracts import CANCEL_SIGNAL, WORKFLOW_NAME, CancelRequest, ResolveAgentInput, SpawnedChild

    from .budget import TokenBudget
    from .options import BOOKKEEPING


@dataclass
class _Started:
    task_id: str
    handle: workflow.ChildWorkflowHandle
    tokens: int
    usd: float | None


class SubAgents:
    def __init__(self, parent: TaskRun, budget: TokenBudget, children: list[str]) -> None:
        self.parent = parent
        self.budget = budget
        self.children = children
        self.running: set[str] = set()

    async def run_tool(self, step: int, arguments: str) -> str:
        """The spawn_agent tool: run a child to its end and report its answer to the model."""
        try:
            args = SpawnAgentArgs.model_validate_json(arguments or "{}")
        except ValidationError as exc:
            e = exc.errors()[0]
            return f"tool error: bad arguments for spawn_agent: {'.'.join(map(str, e['loc']))}: {e['msg']}"
        try:
            started = await self._start(args, f"s{step}")
        except ApplicationError as refused:
            return f"tool error: {refused.message}"
        child = await self._settle(started)
        if isinstance(child, str):
            return f"tool error: {child}"
        return json.dumps({"task_id": child.task_id, "status": child.status.value, "answer": child.result,
                           "error": child.error, "tokens_used": child.spend.tokens_used})

    async def spawn(self, args: SpawnAgentArgs) -> SpawnedChild:
        """A child asked for from outside (SDK, API): started now, settled in the background."""
        started = await self._start(args, "x")
        asyncio.create_task(self._settle(started))
        return SpawnedChild(task_id=started.task_id, tokens=started.tokens, usd=started.usd)

    async def wait_all(self) -> None:
        await workflow.wait_condition(lambda: not self.running)

    async def cancel_all(self, reason: str) -> None:
        for task_id in sorted(self.running):
            await workflow.get_external_workflow_handle(task_id).signal(CANCEL_SIGNAL, CancelRequest(reason=reason))

    async def _start(self, args: SpawnAgentArgs, origin: str) -> _Started:
        agent = await self._resolve(args.agent)
        if self.budget.token_allowance < 2 * MIN_ANSWER_TOKENS or (
                self.budget.usd_allowance is not None and self.budget.usd_allowance <= 0):
            raise ApplicationError("no budget left to give a sub-agent", non_retryable=True)
        tokens, usd = self.budget.carve(args.tokens)
        if tokens < 2 * MIN_ANSWER_TOKENS:
            self.budget.settle_child(tokens, usd, 0)
            raise ApplicationError(f"only {tokens} tokens left, too few for a sub-agent", non_retryable=True)
        task_id = f"{self.parent.task_id}.{origin}.{len(self.children) + 1}"
        self.children.append(task_id)
        self.running.add(task_id)
        spec = TaskSpec(task_id=task_id, agent=args.agent, input=args.input, budget={"tokens": tokens, "usd": usd or None},
                        tenant=self.parent.spec.tenant, priority=self.parent.spec.priority)
        run = TaskRun(task_id=task_id, spec=spec, agent=agent, parent_task_id=self.parent.task_id,
                      submitted_at=workflow.now(), budget_grace_s=0,
                      heartbeat_timeout_s=self.parent.heartbeat_timeout_s)
        handle = await workflow.start_child_workflow(WORKFLOW_NAME, run, id=task_id, result_type=TaskState,
                                                     task_queue=workflow.info().task_queue)
        return _Started(task_id, handle, tokens, usd)

    async def _settle(self, started: _Started) -> TaskState | str:
        try:
            child: TaskState = await started.handle
        except ChildWorkflowError as err:
            # A child that failed outright spent an unknown part of its carve: charge all of it.
            self.budget.settle_child(started.tokens, started.usd, started.tokens, started.usd or 0.0)
            return f"sub-agent {started.task_id} failed: {err.cause or err}"
        finally:
            self.running.discard(started.task_id)
        self.budget.settle_child(started.tokens, started.usd, child.spend.tokens_used, child.spend.usd_used)
        return child

    async def _resolve(self, name: str) -> AgentSpec:
        resolved = await workflow.execute_local_activity_method(
            TaskBookkeeping.resolve_agent, ResolveAgentInput(name=name, tenant=self.parent.spec.tenant),
            **BOOKKEEPING)
        if resolved.agent is None:
            raise ApplicationError(resolved.error or f"no agent named {name!r}", non_retryable=True)
        return resolved.agent
