"""Berth's own loop: the task's steps, each a model call whose reply Berth acts on, until the task ends.

Each step is the loop docs/architecture.md's "How a task runs" describes: reserve and generate (one activity that
counts the prompt, shrinks max_tokens to the allowance and settles the ledger: `TaskActions.generate`), decide
what the reply means (`step_outcomes.settle`, a pure function of the state and the result), then run its tool calls
(on the author's own queue, or the built-ins here: spawn_agent, ask_human) or wait for budget, and checkpoint with
the next step's call.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from pydantic import ValidationError

    from sdk import Message, TaskState, TaskStatus, ToolCall
    from sdk.wire.builtins import AskHumanArgs, tools_offered
    from sdk.wire.contracts import TOOL_ACTIVITY, TOOL_WORKERS_ACTIVITY, LlmStepResult, ToolCallInput, ToolCallResult
    from sdk.wire.limits import MAX_TOOL_RESULT_CHARS
    from sdk.wire.task_events import WaitingForToolWorker
    from sdk.wire.tool_names import ASK_HUMAN_TOOL, SPAWN_AGENT_TOOL

    from . import step_outcomes
    from .code_versions import EVENT_CLOCK, legacy_patched
    from .fleet_step import StepCut, Unplaceable
    from .options import BOOKKEEPING_RETRY, BOOKKEEPING_TIMEOUT
    from .step_outcomes import End, RunTools, WaitForBudget, cause_of
    from .task_actions import TaskActions
    from .task_state import Ending

# A tool worker may be restarting: wait this long for one before the call is reported as failed.
TOOL_WORKER_WAIT = timedelta(minutes=10)
# A tool call not done after this long asks whether any worker serves its queue.
TOOL_WORKER_NOTICE = timedelta(seconds=5)
CHECKS_TOOL_WORKERS = "checks-tool-workers"  # the patch that added the check, in version-0 runs' histories
# Each call is an activity (3 history events at least): 64 calls a step keep a step's history in the hundreds of
# events, far from Temporal's 51,200-event limit, and no model needs more at once.
MAX_TOOL_CALLS_PER_STEP = 64


class BerthLoop:
    def __init__(self, task: TaskActions) -> None:
        self.task = task
        self.state = task.state
        self.agent = task.agent
        self.clock = task.clock

    async def run(self) -> TaskState:
        """Step until a reason to stop (or a step's outcome) ends the task."""
        task = self.task
        while True:
            ending = task.reason_to_stop()
            if ending is not None:
                return await task.finish(*ending)
            if self.clock.continue_as_new_suggested() and not task.sub_agents.running:
                await task.continue_as_new()
            step = self.state.steps_done + 1
            try:
                reply = await task.generate(step)
            except ActivityError as err:
                return await task.finish(TaskStatus.failed, error=f"step {step}: model call failed: {cause_of(err)}")
            except Unplaceable as exc:
                return await task.finish(TaskStatus.failed, error=f"step {step}: {exc}")
            ending = await self._take(step, reply)
            if ending is not None:
                return await task.finish(*ending)

    async def _take(self, step: int, reply: LlmStepResult | StepCut | None) -> Ending | None:
        """Charge the step's call and act on it: wait for budget, run its tools, or end the task (returned)."""
        outcome = step_outcomes.settle(self.state, self.agent, step, reply)
        if isinstance(outcome, RunTools):
            new_messages = [outcome.reply.message]
            new_messages += await asyncio.gather(
                *(self._run_tool(step, call, i) for i, call in enumerate(outcome.reply.tool_calls))
            )
            self.state.result = outcome.reply.message.content or self.state.result
            self.task.step_done(step, new_messages)
            return None
        if outcome.done is not None:
            self.task.step_done(step, outcome.done)
        if isinstance(outcome, WaitForBudget):
            return None if await self._await_budget(outcome.missing) else outcome.otherwise
        if isinstance(outcome, End):
            return outcome.ending
        return None

    async def _await_budget(self, missing: str) -> bool:
        """Wait (durably) for raise_budget; False when the grace period (or the deadline) ends first."""
        state = self.state
        state.budget_raised = False
        state.waiting_for = f"budget: {missing}"
        await self.task.set_status(TaskStatus.awaiting_budget)
        if not await self.clock.wait(
            lambda: state.budget_raised or state.cancel_reason is not None,
            timeout=self.task.until_deadline(self.task.run.budget_grace_s),
        ):
            return False
        state.waiting_for = None
        if state.cancel_reason is None:
            await self.task.set_status(TaskStatus.running)
        return True

    # ----- tools ----------------------------------------------------------------------------
    async def _run_tool(self, step: int, call: ToolCall, index: int) -> Message:
        if index >= MAX_TOOL_CALLS_PER_STEP:
            # A reply (a model's, or a node's that lies) asking for thousands of calls must not fill the task's history.
            content = f"tool error: at most {MAX_TOOL_CALLS_PER_STEP} tool calls run per step; this one was not run"
        elif call.name == SPAWN_AGENT_TOOL and self.agent.allow_spawn:
            content = await self.task.sub_agents.run_tool(step, call.arguments)
        elif call.name == ASK_HUMAN_TOOL and self.agent.allow_ask_human:
            content = await self._ask_human(call)
        else:
            content = await self._call_author_tool(step, call)
        if len(content) > MAX_TOOL_RESULT_CHARS:
            content = content[:MAX_TOOL_RESULT_CHARS]
        return Message(role="tool", tool_call_id=call.id, name=call.name, content=content)

    async def _call_author_tool(self, step: int, call: ToolCall) -> str:
        spec = next((t for t in self.agent.tools if t.name == call.name), None)
        if spec is None:
            available = ", ".join(t.name for t in tools_offered(self.agent)) or "none"
            return f"tool error: unknown tool {call.name!r}; available: {available}"
        handle = workflow.start_activity(
            TOOL_ACTIVITY,
            ToolCallInput(
                task_id=self.task.run.task_id, step=step, call_id=call.id, name=call.name, arguments=call.arguments
            ),
            task_queue=self.agent.task_queue,
            result_type=ToolCallResult,
            start_to_close_timeout=timedelta(seconds=spec.timeout_s),
            schedule_to_close_timeout=timedelta(seconds=spec.timeout_s * spec.max_attempts) + TOOL_WORKER_WAIT,
            retry_policy=RetryPolicy(maximum_attempts=spec.max_attempts, initial_interval=timedelta(seconds=1)),
        )
        # A cancelled task stops waiting for its tools: their worker may not even be running.
        if self._checks_tool_workers():
            await self._say_if_no_tool_worker(handle, call.name)
        await self.clock.wait(lambda: handle.done() or self.state.cancel_reason is not None)
        if not handle.done():
            handle.cancel()
        try:
            result: ToolCallResult = await handle
        except ActivityError as err:
            if self.state.cancel_reason is not None:
                return f"tool error: {call.name} was not waited for: the task was cancelled"
            return f"tool error: {call.name} failed after {spec.max_attempts} attempt(s): {cause_of(err)}"
        return result.content

    def _checks_tool_workers(self) -> bool:
        """Every run checks for a tool worker, except version-0 runs whose history says they did not."""
        if self.task.run.workflow_version >= EVENT_CLOCK:
            return True
        return legacy_patched(CHECKS_TOOL_WORKERS)

    async def _say_if_no_tool_worker(self, handle: workflow.ActivityHandle, tool: str) -> None:
        """A tool call still queued after TOOL_WORKER_NOTICE on a queue no worker polls: the task's state, events
        and UI say it waits for a tool worker (until the call ends, by a worker that came or by its timeout)."""
        state = self.state

        def finished() -> bool:
            return handle.done() or state.cancel_reason is not None

        if await self.clock.wait(finished, timeout=TOOL_WORKER_NOTICE):
            return
        queue = self.agent.task_queue
        if await workflow.execute_local_activity(
            TOOL_WORKERS_ACTIVITY,
            queue,
            result_type=int,
            start_to_close_timeout=BOOKKEEPING_TIMEOUT,
            retry_policy=BOOKKEEPING_RETRY,
        ):
            return  # a worker serves it: the tool is just slow
        waiting = f"a tool worker on {queue}: start one with serve() for agent {self.agent.name}"
        state.waiting_for = waiting
        await self.task.record_event(WaitingForToolWorker(task_queue=queue, tool=tool))
        await workflow.wait_condition(finished)
        if state.waiting_for == waiting:
            state.waiting_for = None
            if state.cancel_reason is None:
                await self.task.set_status(TaskStatus.running)

    async def _ask_human(self, call: ToolCall) -> str:
        """The ask_human tool: the task waits awaiting_input until the answer update (or its timeout)."""
        state = self.state
        try:
            args = AskHumanArgs.model_validate_json(call.arguments or "{}")
        except ValidationError as exc:
            return f"tool error: bad arguments for ask_human: {_first_error(exc)}"
        state.answer_text, state.question = None, args.question
        state.waiting_for = "input: a human answer"
        await self.task.set_status(TaskStatus.awaiting_input)
        if not await self.clock.wait(
            lambda: state.answer_text is not None or state.cancel_reason is not None,
            timeout=self.task.until_deadline(self.agent.ask_human_timeout_s),
        ):
            state.answer_text = None
        answer, state.question, state.waiting_for = state.answer_text, None, None
        if state.cancel_reason is None:
            await self.task.set_status(TaskStatus.running)
        if answer is None:
            return "tool error: no human answer arrived in time"
        return answer


def _first_error(exc: ValidationError) -> str:
    e = exc.errors()[0]
    return f"{'.'.join(map(str, e['loc'])) or 'arguments'}: {e['msg']}"
