"""Sub-agents of a task: carve their budgets, run them as child workflows, settle their spend.

A child's whole budget is set aside from the parent's remainder when it starts and only
what it really used is charged when it ends, so the tree obeys used ≤ limit however its
members interleave. Children run with no budget grace: a child out of tokens ends at once
and hands its partial answer back instead of stalling its parent. A child's budget grows
only here, out of the parent's remainder (`raise_child`): the tree is one account. A child
that still spent more than it was given (a bug, never silent) ends its parent `failed`.

A child's id extends its parent's after a mark no client-chosen id holds, with a random part
(sdk.wire.limits.SUB_AGENT_MARK): no client can take it first, so no spawn is ever wedged by one.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass

from temporalio import workflow
from temporalio.exceptions import ApplicationError, ChildWorkflowError

with workflow.unsafe.imports_passed_through():
    from pydantic import ValidationError

    from sdk import AgentSpec, TaskSpec, TaskState
    from sdk.wire.builtins import SpawnAgentArgs
    from sdk.wire.contracts import (
        CANCEL_SIGNAL,
        GRANT_BUDGET_SIGNAL,
        RESOLVE_AGENT_ACTIVITY,
        WORKFLOW_NAME,
        CancelRequest,
        RaiseBudget,
        RaiseChildBudget,
        ResolveAgentInput,
        ResolveAgentResult,
        SpawnedChild,
    )
    from sdk.wire.limits import MAX_TASK_ID_CHARS, MAX_TOKEN_BUDGET, MAX_USD_BUDGET, MIN_ANSWER_TOKENS, SUB_AGENT_MARK
    from sdk.wire.task_run import CURRENT_WORKFLOW_VERSION, TaskRun

    from .budget import BudgetViolation, TokenBudget
    from .options import BOOKKEEPING_RETRY, BOOKKEEPING_TIMEOUT


# What Temporal calls a signal to a workflow that has closed (or never was).
CHILD_ALREADY_ENDED = "ExternalWorkflowExecutionNotFound"


@dataclass
class _Started:
    task_id: str
    handle: workflow.ChildWorkflowHandle
    tokens: int  # carved for it so far (raise_child adds to it)
    usd: float | None


class SubAgents:
    def __init__(self, parent: TaskRun, budget: TokenBudget, children: list[str]) -> None:
        self.parent = parent
        self.budget = budget
        self.children = children
        self.running: set[str] = set()
        self.starting = 0  # spawns between their carve and their child's start (`_start`)
        self._started: dict[str, _Started] = {}
        self.violation: str | None = None  # a child that spent beyond its carve: the parent ends failed

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
        return json.dumps(
            {
                "task_id": child.task_id,
                "status": child.status.value,
                "answer": child.result,
                "error": child.error,
                "tokens_used": child.spend.tokens_used,
            }
        )

    async def spawn(self, args: SpawnAgentArgs) -> SpawnedChild:
        """A child asked for from outside (SDK, API): started now, settled in the background (`_settle` never
        raises, so nothing it finds is lost in the background task)."""
        started = await self._start(args, "x")
        asyncio.create_task(self._settle(started))
        return SpawnedChild(task_id=started.task_id, tokens=started.tokens, usd=started.usd)

    def check_raise(self, req: RaiseChildBudget) -> None:
        """Refuse a raise the parent's remainder cannot pay for, or of a task that is not a running child."""
        if req.child_task_id not in self.running:
            raise ApplicationError(f"task_id: {req.child_task_id} is not a running sub-agent of {self.parent.task_id}")
        remaining = self.budget.token_allowance
        if req.tokens > remaining:
            raise ApplicationError(
                f"tokens: a sub-agent's budget grows out of its parent's remainder: asked for"
                f" {req.tokens} tokens, but only {remaining} remain of task {self.parent.task_id}"
            )
        usd_left = self.budget.usd_allowance
        if req.usd > 0 and (usd_left is None or self._started[req.child_task_id].usd is None):
            raise ApplicationError("usd: this sub-agent has no dollar limit to raise")
        if usd_left is not None and req.usd > usd_left:
            raise ApplicationError(
                f"usd: asked for ${req.usd}, but only ${usd_left:.6f} remain of task {self.parent.task_id}"
            )

    async def raise_child(self, req: RaiseChildBudget) -> SpawnedChild:
        """Carve more for a running child out of this task's remainder, then tell the child: the carve is taken
        first, so whether or not the child hears before it ends, it never spends what the parent did not set
        aside (its settlement returns whatever it did not use)."""
        started = self._started[req.child_task_id]
        usd = req.usd if started.usd is not None else 0.0
        self._carve_more(started, req.tokens, usd)
        try:
            await workflow.get_external_workflow_handle(req.child_task_id).signal(
                GRANT_BUDGET_SIGNAL, RaiseBudget(tokens=req.tokens, usd=usd)
            )
        except Exception as exc:  # it ended meanwhile: nothing more was given, so nothing more is set aside
            self._carve_more(started, -req.tokens, -usd)
            raise ApplicationError(f"sub-agent {req.child_task_id} has ended: {exc}") from exc
        return SpawnedChild(task_id=started.task_id, tokens=started.tokens, usd=started.usd)

    def _carve_more(self, started: _Started, tokens: int, usd: float) -> None:
        self.budget.reserved_tokens += tokens
        started.tokens += tokens
        if usd and started.usd is not None:
            self.budget.reserved_usd += usd
            started.usd += usd

    async def wait_all(self) -> None:
        await workflow.wait_condition(lambda: not self.running)

    async def cancel_all(self, reason: str) -> None:
        """Tell every running child to stop, one after another (the commands older histories replay). A child
        may have ended a moment ago with its end not yet heard here (its `_settle` books it): that signal finds
        no workflow, which must not fail this task."""
        for task_id in sorted(self.running):
            await self._cancel(task_id, reason)

    async def _cancel(self, task_id: str, reason: str) -> None:
        try:
            await workflow.get_external_workflow_handle(task_id).signal(CANCEL_SIGNAL, CancelRequest(reason=reason))
        except ApplicationError as exc:
            if exc.type != CHILD_ALREADY_ENDED:
                # The child is still waited for (`wait_all`): it ends on its own, by its budget or deadline.
                workflow.logger.error("could not cancel sub-agent %s of %s: %s", task_id, self.parent.task_id, exc)

    async def _start(self, args: SpawnAgentArgs, origin: str) -> _Started:
        """Carve the child's budget and start it. While this runs the carve is taken but the child not yet
        `running`: `starting` counts it, so that a task that ends meanwhile waits for it rather than end with the
        carve reserved."""
        self.starting += 1
        try:
            return await self._carve_and_start(args, origin)
        finally:
            self.starting -= 1

    async def _carve_and_start(self, args: SpawnAgentArgs, origin: str) -> _Started:
        agent = await self._resolve(args.agent)
        if self.budget.token_allowance < 2 * MIN_ANSWER_TOKENS or (
            self.budget.usd_allowance is not None and self.budget.usd_allowance <= 0
        ):
            raise ApplicationError("no budget left to give a sub-agent", non_retryable=True)
        task_id = f"{self.parent.task_id}{SUB_AGENT_MARK}{origin}.{len(self.children) + 1}.{workflow.uuid4().hex[:8]}"
        if len(task_id) > MAX_TASK_ID_CHARS:
            raise ApplicationError(
                f"sub-agents nest too deep under {self.parent.task_id}: a sub-agent's id would be"
                f" longer than {MAX_TASK_ID_CHARS} characters",
                non_retryable=True,
            )
        tokens, usd = self.budget.carve(args.tokens, MAX_TOKEN_BUDGET, MAX_USD_BUDGET)
        if tokens < 2 * MIN_ANSWER_TOKENS:
            self.budget.settle_child(tokens, usd, 0)
            raise ApplicationError(f"only {tokens} tokens left, too few for a sub-agent", non_retryable=True)
        spec = TaskSpec(
            task_id=task_id,
            agent=args.agent,
            input=args.input,
            budget={"tokens": tokens, "usd": usd or None},
            tenant=self.parent.spec.tenant,
            priority=self.parent.spec.priority,
        )
        run = TaskRun(
            task_id=task_id,
            spec=spec,
            agent=agent,
            parent_task_id=self.parent.task_id,
            submitted_at=workflow.now(),
            budget_grace_s=0,
            heartbeat_timeout_s=self.parent.heartbeat_timeout_s,
            workflow_version=CURRENT_WORKFLOW_VERSION,  # a new run: this build's rules (code_versions.py)
            objectives=self.parent.objectives,  # it works for whoever waits on its parent
        )
        try:
            handle = await workflow.start_child_workflow(
                WORKFLOW_NAME, run, id=task_id, result_type=TaskState, task_queue=workflow.info().task_queue
            )
        except Exception as exc:  # the start failed (an id taken, say): the carve goes back, nothing waits on it
            self.budget.settle_child(tokens, usd, 0)
            raise ApplicationError(f"sub-agent {task_id} could not start: {exc}", non_retryable=True) from exc
        self.children.append(task_id)
        self.running.add(task_id)
        started = self._started[task_id] = _Started(task_id, handle, tokens, usd)
        return started

    async def _settle(self, started: _Started) -> TaskState | str:
        """Return the child's carve and charge what it used. Never raises: a violation is recorded for the
        parent to end on, and the books stay truthful."""
        try:
            child: TaskState = await started.handle
        except ChildWorkflowError as err:
            # A child that failed outright spent an unknown part of its carve: charge all of it.
            self.budget.settle_child(started.tokens, started.usd, started.tokens, started.usd or 0.0)
            return f"sub-agent {started.task_id} failed: {err.cause or err}"
        finally:
            self.running.discard(started.task_id)
            self._started.pop(started.task_id, None)
        spent = child.spend
        try:
            self.budget.settle_child(started.tokens, started.usd, spent.tokens_used, spent.usd_used)
        except BudgetViolation as violation:
            self.budget.settle_overrun(started.tokens, started.usd, spent.tokens_used, spent.usd_used)
            self.violation = f"sub-agent {started.task_id}: {violation}"
            workflow.logger.error("budget violation in %s's tree: %s", self.parent.task_id, self.violation)
        return child

    async def _resolve(self, name: str) -> AgentSpec:
        resolved = await workflow.execute_local_activity(
            RESOLVE_AGENT_ACTIVITY,
            ResolveAgentInput(name=name, tenant=self.parent.spec.tenant),
            result_type=ResolveAgentResult,
            start_to_close_timeout=BOOKKEEPING_TIMEOUT,
            retry_policy=BOOKKEEPING_RETRY,
        )
        if resolved.agent is None:
            raise ApplicationError(resolved.error or f"no agent named {name!r}", non_retryable=True)
        return resolved.agent
