"""AgentTaskWorkflow: one agent task, step by step, under a hard budget.

Each step is the loop docs/architecture.md's "How a task runs" describes: reserve and generate (one activity that
counts the prompt, shrinks max_tokens to the allowance and settles the ledger), run the tool calls
(on the author's own queue, or built-ins here), then checkpoint. The conversation itself
never enters Temporal history: it lives in the checkpoint store and the workflow keeps the
checkpoint's id and hash, so history stays small and continue-as-new restarts from an id.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    import jsonschema  # noqa: F401  (passed through once: an output schema's checks import it lazily)
    from pydantic import ValidationError

    from sdk import CheckpointRef, GpuTrouble, Message, Spend, TaskState, TaskStatus, ToolCall
    from sdk.wire.builtins import AskHumanArgs, SpawnAgentArgs, tools_offered
    from sdk.wire.contracts import (
        ANSWER_UPDATE,
        BEGIN_TASK_ACTIVITY,
        CANCEL_SIGNAL,
        CHECKPOINT_ACTIVITY,
        GRANT_BUDGET_SIGNAL,
        NODE_GONE_SIGNAL,
        RAISE_BUDGET_UPDATE,
        RAISE_CHILD_BUDGET_UPDATE,
        RECORD_STATE_ACTIVITY,
        SIMULATE_PREEMPTION_SIGNAL,
        SPAWN_UPDATE,
        STATE_QUERY,
        TOOL_ACTIVITY,
        TOOL_WORKERS_ACTIVITY,
        WORKFLOW_NAME,
        BeginTaskInput,
        BeginTaskResult,
        CancelRequest,
        CheckpointInput,
        HumanAnswer,
        LlmStepInput,
        LlmStepResult,
        NodeGone,
        PendingStep,
        RaiseBudget,
        RaiseChildBudget,
        RecordStateInput,
        SpawnedChild,
        ToolCallInput,
        ToolCallResult,
    )
    from sdk.wire.lease import LeaseRequest
    from sdk.wire.limits import MAX_TOOL_RESULT_CHARS
    from sdk.wire.loop_approvals import (
        LOOP_APPROVALS_QUERY,
        LOOP_ASK_APPROVAL_UPDATE,
        LOOP_DECIDE_UPDATE,
        ApprovalDecision,
        ApprovalRequest,
        LoopApprovals,
    )
    from sdk.wire.own_loop import (
        LOOP_ASKED_QUERY,
        LOOP_CALL_UPDATE,
        LOOP_FINISH_UPDATE,
        LOOP_TOOL_RESULT_QUERY,
        LOOP_TOOL_RESULT_UPDATE,
        LOOP_TRANSCRIPT_QUERY,
        LoopCall,
        LoopFinish,
        LoopReply,
        LoopToolResult,
        LoopTranscript,
    )
    from sdk.wire.task_run import TaskRun
    from sdk.wire.tool_names import ASK_HUMAN_TOOL, SPAWN_AGENT_TOOL

    from . import own_loop_rules, step_outcomes, task_checks, task_state
    from .code_versions import EVENT_CLOCK, legacy_patched
    from .event_clock import EventClock
    from .fleet_step import FleetStep, StepCut, Unplaceable
    from .loop_record import LoopRecord
    from .options import BOOKKEEPING_RETRY, BOOKKEEPING_TIMEOUT
    from .own_loop_rules import Refused
    from .step_outcomes import End, RunTools, WaitForBudget
    from .sub_agents import SubAgents
    from .task_state import Ending

# A tool worker may be restarting: wait this long for one before the call is reported as failed.
TOOL_WORKER_WAIT = timedelta(minutes=10)
# A tool call not done after this long asks whether any worker serves its queue.
TOOL_WORKER_NOTICE = timedelta(seconds=5)
CHECKS_TOOL_WORKERS = "checks-tool-workers"  # the patch that added the check, in version-0 runs' histories
# Each call is an activity (3 history events at least): 64 calls a step keep a step's history in the hundreds of
# events, far from Temporal's 51,200-event limit, and no model needs more at once.
MAX_TOOL_CALLS_PER_STEP = 64


@workflow.defn(name=WORKFLOW_NAME)
class AgentTaskWorkflow:
    @workflow.init
    def __init__(self, run: TaskRun) -> None:
        self.run_input = run
        self.agent = run.agent
        # The clock and continue-as-new hint that decisions read (code_versions.py, rule 3); set here, in the
        # run's first workflow task, and at each event-fixed moment after.
        self.clock = EventClock(event_fixed=run.workflow_version >= EVENT_CLOCK)
        carried = run.carried
        self.state = task_state.begin(run)
        self.sub_agents = SubAgents(run, self.state.budget, self.state.children)
        self.fleet = FleetStep(
            self._set_waiting_for_gpu,
            self._stop_waiting,
            lambda: self.state.cancel_reason is not None,
            self._record_event,
            self.clock,
            max_interruptions=run.spec.max_interruptions,
            recovery=run.spec.recovery,
            heartbeat_timeout=timedelta(seconds=run.heartbeat_timeout_s),
            interruptions=carried.interruptions if carried else 0,
            placements_step=self.state.steps_done + 1 if carried else 0,
            placements_used=carried.placements_of_next_step if carried else 0,
            workflow_version=run.workflow_version,
        )
        # An agent whose loop is the author's own: its model calls arrive as updates, one at a time.
        self.own_loop = LoopRecord(self.state.own_loop) if self.state.own_loop is not None else None
        self.loop_lock = asyncio.Lock()

    # ----- the step loop -------------------------------------------------------------------
    @workflow.run
    async def run(self, run: TaskRun) -> TaskState:
        if self.state.checkpoint is None:
            begun = await workflow.execute_local_activity(
                BEGIN_TASK_ACTIVITY,
                BeginTaskInput(run=run),
                result_type=BeginTaskResult,
                start_to_close_timeout=BOOKKEEPING_TIMEOUT,
                retry_policy=BOOKKEEPING_RETRY,
            )
            self.state.checkpoint, self.state.steps_done = begun.checkpoint, begun.step
        await self._set_status(TaskStatus.running, spec_json=run.spec.model_dump_json())
        if self.own_loop is not None:
            return await self._serve_own_loop(self.own_loop)
        while True:
            ending = self._reason_to_stop()
            if ending is not None:
                return await self._finish(*ending)
            if self.clock.continue_as_new_suggested() and not self.sub_agents.running:
                await workflow.wait_condition(workflow.all_handlers_finished)
                await self._flush_pending()
                workflow.continue_as_new(self._continuation())
            step = self.state.steps_done + 1
            try:
                reply = await self._generate(step)
            except ActivityError as err:
                return await self._finish(TaskStatus.failed, error=f"step {step}: model call failed: {_cause(err)}")
            except Unplaceable as exc:
                return await self._finish(TaskStatus.failed, error=f"step {step}: {exc}")
            ending = await self._take(step, reply)
            if ending is not None:
                return await self._finish(*ending)

    async def _take(self, step: int, reply: LlmStepResult | StepCut | None) -> Ending | None:
        """Charge the step's call and act on it: wait for budget, run its tools, or end the task (returned)."""
        outcome = step_outcomes.settle(self.state, self.agent, step, reply)
        if isinstance(outcome, RunTools):
            new_messages = [outcome.reply.message]
            new_messages += await asyncio.gather(
                *(self._run_tool(step, call, i) for i, call in enumerate(outcome.reply.tool_calls))
            )
            self.state.result = outcome.reply.message.content or self.state.result
            self._step_done(step, new_messages)
            return None
        if outcome.done is not None:
            self._step_done(step, outcome.done)
        if isinstance(outcome, WaitForBudget):
            return None if await self._await_budget(outcome.missing) else outcome.otherwise
        if isinstance(outcome, End):
            return outcome.ending
        return None

    def _reason_to_stop(self) -> Ending | None:
        return step_outcomes.reason_to_stop(self.state, self.run_input, self.sub_agents.violation, self.clock.now())

    async def _generate(self, step: int, loop_call: LoopCall | None = None) -> LlmStepResult | StepCut | None:
        """The step's model call: Berth's own, or the one an own loop sent (its tools, settings, instructions)."""
        assert self.state.checkpoint is not None
        spec = self.run_input.spec
        max_tokens = self.agent.max_tokens_per_step
        if loop_call is not None:
            tools, settings = loop_call.tools, loop_call.settings
            max_tokens = min(max_tokens, loop_call.max_tokens or max_tokens)
        else:
            # A repair step only answers: its tools would give the model something else to do than fix its answer.
            tools = [] if self.state.repairing else [t.to_openai() for t in tools_offered(self.agent)]
            settings = step_outcomes.call_settings(self.run_input, tools)
        inp = LlmStepInput(
            task_id=self.run_input.task_id,
            step=step,
            checkpoint=self.state.checkpoint,
            pending=self.state.pending,
            model=self.agent.model,
            max_tokens=max_tokens,
            token_allowance=self.state.budget.token_allowance,
            usd_allowance=self.state.budget.usd_allowance,
            tenant=spec.tenant,
            tools=tools,
            settings=settings,
            instructions=loop_call.instructions if loop_call is not None else None,
        )
        lease = LeaseRequest(
            task_id=self.run_input.task_id,
            step=step,
            model=self.agent.model,
            tokens=max(1, min(max_tokens, self.state.budget.token_allowance)),
            tenant=spec.tenant,
            priority=spec.priority,
            service_class=spec.service_class,
            objectives=self.run_input.objectives,  # the activity's input only: no command changes (replay-safe)
        )
        return await self.fleet.generate(inp, lease)

    # ----- an own loop (the author's, calling the model through Berth) -------------------
    async def _serve_own_loop(self, loop: LoopRecord) -> TaskState:
        """Answer the loop's calls (updates) until it finishes, falls silent, runs out of budget or is stopped."""
        self.state.loop_last_call_at = self.clock.time()
        while True:
            due = loop.approval_due_at(self.agent.ask_human_timeout_s)
            if due is not None and self.clock.time() >= due and self.state.cancel_reason is None:
                reason = f"no decision arrived within {self.agent.ask_human_timeout_s:g} s"
                await self._decide(loop, ApprovalDecision(approve=False, reason=reason))
            ending = self._own_loop_ending(loop)
            if ending is not None:
                await workflow.wait_condition(lambda: not self.loop_lock.locked())
                return await self._finish(*ending)
            # Not while a person is asked: the question and status would have to be carried too, for a wait that
            # adds a handful of events to the history.
            if self.clock.continue_as_new_suggested() and not self.loop_lock.locked() and not loop.awaiting_approval:
                await workflow.wait_condition(workflow.all_handlers_finished)
                await self._flush_pending()
                workflow.continue_as_new(self._continuation())
            seen = self.state.loop_wakeups
            try:
                await workflow.wait_condition(
                    lambda: self.state.loop_wakeups != seen or self.state.cancel_reason is not None,  # noqa: B023  (awaited here)
                    timeout=self._until_deadline(self._own_loop_wait(loop)),
                )
            except TimeoutError:
                self.clock.mark()  # the timer fired: a moment history fixes (a wakeup may follow a local activity)

    def _own_loop_ending(self, loop: LoopRecord) -> Ending | None:
        return own_loop_rules.ending(self.state, self.run_input, self.clock.now(), busy=self.loop_lock.locked())

    def _own_loop_wait(self, loop: LoopRecord) -> float:
        """Until the loop's silence (or the budget's grace) would end the task."""
        return own_loop_rules.wait_s(self.state, self.run_input, workflow.time())

    @workflow.update(name=LOOP_CALL_UPDATE)
    async def loop_call(self, call: LoopCall) -> LoopReply:
        """One model call of the task's own loop, run as a step of this task (reserved, placed, booked); the
        same call again (a loop re-run after a crash) gets its reply back without a new generation."""
        loop = self.own_loop
        assert loop is not None  # the validator refused the call otherwise
        self.clock.mark()  # the update's arrival: a moment history fixes
        async with self.loop_lock:
            replayed = loop.answered(call)
            if replayed is not None:
                return replayed
            loop.check_extends(call)
            try:
                return await self._loop_step(loop, call)
            finally:
                self.state.loop_last_call_at = self.clock.time()
                self.state.loop_wakeups += 1

    @loop_call.validator
    def _check_loop_call(self, call: LoopCall) -> None:
        self._check_own_loop_open()

    async def _loop_step(self, loop: LoopRecord, call: LoopCall) -> LoopReply:
        refused = own_loop_rules.refusal_before_call(self.state, self.run_input, self.clock.now())
        if refused is not None:
            raise refused
        step = self.state.steps_done + 1
        loop.absorb(call.new_messages)
        if call.new_messages:  # what the loop added (its tool results, its own turns) goes with the step's input
            if self.state.pending is not None:
                self.state.pending.new_messages.extend(call.new_messages)
            else:
                self.state.pending = PendingStep(
                    step=self.state.steps_done, new_messages=list(call.new_messages), state=self._state()
                )
        try:
            reply = await self._generate(step, call)
        except (ActivityError, Unplaceable) as exc:
            message = f"step {step}: model call failed: {_cause(exc) if isinstance(exc, ActivityError) else exc}"
            self.state.loop_over = TaskStatus.failed, message
            raise ApplicationError(message, type="ModelCallFailed", non_retryable=True) from None
        answer = own_loop_rules.charge_call(self.state, step, reply, self.clock.time())
        if isinstance(answer, Refused):
            if answer.status is not None:
                await self._set_status(answer.status)
            raise answer.error
        loop.take(call, answer)
        self.state.result = answer.message.content or self.state.result
        self._step_done(step, [answer.message])
        if self.state.short_since is not None:
            self.state.short_since, self.state.waiting_for = None, None
            await self._set_status(TaskStatus.running)
        return answer

    @workflow.update(name=LOOP_TOOL_RESULT_UPDATE)
    def loop_tool_result(self, result: LoopToolResult) -> None:
        """Keep a tool's result, so that the loop re-run after a crash gets it back instead of running it again."""
        assert self.own_loop is not None
        self.own_loop.record_tool_result(result)

    @loop_tool_result.validator
    def _check_loop_tool_result(self, result: LoopToolResult) -> None:
        self._check_own_loop_open()

    @workflow.update(name=LOOP_FINISH_UPDATE)
    def loop_finish(self, finish: LoopFinish) -> None:
        assert self.own_loop is not None
        if self.state.loop_finished is None:
            self.state.loop_finished = finish.output, finish.error
            self.state.loop_wakeups += 1

    @loop_finish.validator
    def _check_loop_finish(self, finish: LoopFinish) -> None:
        self._check_own_loop_open()

    @workflow.update(name=LOOP_ASK_APPROVAL_UPDATE)
    async def loop_ask_approval(self, request: ApprovalRequest) -> LoopApprovals:
        """The loop stopped at tool calls that need a person's word: the task waits awaiting_input with a
        question naming them, holding the loop's state until each call is approved or rejected."""
        loop = self.own_loop
        assert loop is not None  # the validator refused the request otherwise
        self.clock.mark()  # the update's arrival: a moment history fixes
        if loop.ask_approval(request, self.clock.time()):
            own_loop_rules.approval_asked(self.state, request.calls)
            calls = [c.model_dump() for c in request.calls]
            await self._record_event("approval_asked", {"calls": calls, "trace_id": request.trace_id})
            self.state.loop_wakeups += 1
        assert loop.progress.approvals is not None
        return loop.progress.approvals

    @loop_ask_approval.validator
    def _check_loop_ask_approval(self, request: ApprovalRequest) -> None:
        self._check_own_loop_open()

    @workflow.update(name=LOOP_DECIDE_UPDATE)
    async def loop_decide(self, decision: ApprovalDecision) -> LoopApprovals:
        """A person approved or rejected a waiting call (or all of them); once none waits, the loop resumes."""
        loop = self.own_loop
        assert loop is not None  # the validator refused the decision otherwise
        self.clock.mark()
        await self._decide(loop, decision)
        assert loop.progress.approvals is not None
        return loop.progress.approvals

    @loop_decide.validator
    def _check_loop_decide(self, decision: ApprovalDecision) -> None:
        self._check_own_loop_open()
        assert self.own_loop is not None
        self.own_loop.check_decision(decision)

    async def _decide(self, loop: LoopRecord, decision: ApprovalDecision) -> None:
        decided = loop.decide(decision)
        if not loop.awaiting_approval:
            own_loop_rules.approvals_settled(self.state, self.clock.time())  # the loop's silence counts from here
        details = {"call_ids": decided, "approved": decision.approve, "reason": decision.reason}
        await self._record_event("approval_decided", details)

    @workflow.query(name=LOOP_APPROVALS_QUERY)
    def loop_approvals(self) -> LoopApprovals | None:
        return self.own_loop.progress.approvals if self.own_loop is not None else None

    @workflow.query(name=LOOP_TRANSCRIPT_QUERY)
    def loop_transcript(self) -> LoopTranscript | None:
        return self.own_loop.transcript() if self.own_loop is not None else None

    @workflow.query(name=LOOP_ASKED_QUERY)
    def loop_asked(self, conversation: str) -> list[dict[str, str]]:
        return self.own_loop.asked_on(conversation) if self.own_loop is not None else []

    @workflow.query(name=LOOP_TOOL_RESULT_QUERY)
    def loop_tool_result_of(self, call_id: str) -> str | None:
        return self.own_loop.tool_result(call_id) if self.own_loop is not None else None

    def _check_own_loop_open(self) -> None:
        task_checks.check_own_loop_open(self.run_input, self.state)

    async def _set_waiting_for_gpu(self, reason: str | None, trouble: GpuTrouble | None) -> None:
        self.state.waiting_for, self.state.gpu_trouble = reason, trouble
        await self._set_status(TaskStatus.waiting_for_gpu if reason is not None else TaskStatus.running)

    async def _record_event(self, kind: str, details: dict) -> None:
        await workflow.execute_local_activity(
            RECORD_STATE_ACTIVITY,
            RecordStateInput(state=self._state(), event=kind, details=details),
            start_to_close_timeout=BOOKKEEPING_TIMEOUT,
            retry_policy=BOOKKEEPING_RETRY,
        )

    def _stop_waiting(self) -> bool:
        return self._reason_to_stop() is not None

    def _until_deadline(self, wait_s: float) -> timedelta:
        """A wait of `wait_s`, cut short by the task's deadline (Temporal needs a positive timeout)."""
        wait = timedelta(seconds=wait_s)
        deadline = self.run_input.spec.budget.deadline
        if deadline is not None:
            wait = min(wait, deadline - workflow.now())
        return max(wait, timedelta(milliseconds=1))

    def _step_done(self, step: int, new_messages: list[Message]) -> None:
        self.state.steps_done = step
        self.state.pending = PendingStep(step=step, new_messages=new_messages, state=self._state())

    async def _flush_pending(self) -> None:
        """Write the last step's checkpoint when no LLM call is coming to carry it."""
        if self.state.pending is None or self.state.checkpoint is None:
            return
        self.state.checkpoint = await workflow.execute_local_activity(
            CHECKPOINT_ACTIVITY,
            CheckpointInput(task_id=self.run_input.task_id, parent=self.state.checkpoint, pending=self.state.pending),
            result_type=CheckpointRef,
            start_to_close_timeout=BOOKKEEPING_TIMEOUT,
            retry_policy=BOOKKEEPING_RETRY,
        )
        self.state.pending = None

    async def _await_budget(self, missing: str) -> bool:
        """Wait (durably) for raise_budget; False when the grace period (or the deadline) ends first."""
        self.state.budget_raised = False
        self.state.waiting_for = f"budget: {missing}"
        await self._set_status(TaskStatus.awaiting_budget)
        if not await self.clock.wait(
            lambda: self.state.budget_raised or self.state.cancel_reason is not None,
            timeout=self._until_deadline(self.run_input.budget_grace_s),
        ):
            return False
        self.state.waiting_for = None
        if self.state.cancel_reason is None:
            await self._set_status(TaskStatus.running)
        return True

    # ----- tools ----------------------------------------------------------------------------
    async def _run_tool(self, step: int, call: ToolCall, index: int) -> Message:
        if index >= MAX_TOOL_CALLS_PER_STEP:
            # A reply (a model's, or a node's that lies) asking for thousands of calls must not fill the task's history.
            content = f"tool error: at most {MAX_TOOL_CALLS_PER_STEP} tool calls run per step; this one was not run"
        elif call.name == SPAWN_AGENT_TOOL and self.agent.allow_spawn:
            content = await self.sub_agents.run_tool(step, call.arguments)
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
                task_id=self.run_input.task_id, step=step, call_id=call.id, name=call.name, arguments=call.arguments
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
            return f"tool error: {call.name} failed after {spec.max_attempts} attempt(s): {_cause(err)}"
        return result.content

    def _checks_tool_workers(self) -> bool:
        """Every run checks for a tool worker, except version-0 runs whose history says they did not."""
        if self.run_input.workflow_version >= EVENT_CLOCK:
            return True
        return legacy_patched(CHECKS_TOOL_WORKERS)

    async def _say_if_no_tool_worker(self, handle: workflow.ActivityHandle, tool: str) -> None:
        """A tool call still queued after TOOL_WORKER_NOTICE on a queue no worker polls: the task's state, events
        and UI say it waits for a tool worker (until the call ends, by a worker that came or by its timeout)."""

        def finished() -> bool:
            return handle.done() or self.state.cancel_reason is not None

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
        self.state.waiting_for = waiting
        await self._record_event("waiting_for_tool_worker", {"task_queue": queue, "tool": tool})
        await workflow.wait_condition(finished)
        if self.state.waiting_for == waiting:
            self.state.waiting_for = None
            if self.state.cancel_reason is None:
                await self._set_status(TaskStatus.running)

    async def _ask_human(self, call: ToolCall) -> str:
        try:
            args = AskHumanArgs.model_validate_json(call.arguments or "{}")
        except ValidationError as exc:
            return f"tool error: bad arguments for ask_human: {_first_error(exc)}"
        self.state.answer_text, self.state.question = None, args.question
        self.state.waiting_for = "input: a human answer"
        await self._set_status(TaskStatus.awaiting_input)
        if not await self.clock.wait(
            lambda: self.state.answer_text is not None or self.state.cancel_reason is not None,
            timeout=self._until_deadline(self.agent.ask_human_timeout_s),
        ):
            self.state.answer_text = None
        answer, self.state.question, self.state.waiting_for = self.state.answer_text, None, None
        if self.state.cancel_reason is None:
            await self._set_status(TaskStatus.running)
        if answer is None:
            return "tool error: no human answer arrived in time"
        return answer

    # ----- messages from outside ---------------------------------------------------------
    @workflow.query(name=STATE_QUERY)
    def state_query(self) -> TaskState:
        return self._state()

    @workflow.update(name=RAISE_BUDGET_UPDATE)
    def raise_budget(self, req: RaiseBudget) -> Spend:
        self.state.budget.raise_limit(req.tokens, req.usd)
        self.state.budget_raised = True
        return self.state.budget.spend()

    @raise_budget.validator
    def _check_raise(self, req: RaiseBudget) -> None:
        task_checks.check_raise(self.run_input, self.state, req)

    @workflow.update(name=RAISE_CHILD_BUDGET_UPDATE)
    async def raise_child_budget(self, req: RaiseChildBudget) -> SpawnedChild:
        """Grow a running sub-agent's budget out of this task's remainder (the tree is one account)."""
        return await self.sub_agents.raise_child(req)

    @raise_child_budget.validator
    def _check_raise_child(self, req: RaiseChildBudget) -> None:
        task_checks.check_raise_child(self.state, req)
        self.sub_agents.check_raise(req)

    @workflow.signal(name=GRANT_BUDGET_SIGNAL)
    def grant_budget(self, req: RaiseBudget) -> None:
        """Budget the parent carved for this sub-agent out of its own remainder (only the parent sends it)."""
        self.state.budget.raise_limit(req.tokens, req.usd)
        self.state.budget_raised = True

    @workflow.update(name=ANSWER_UPDATE)
    def answer(self, req: HumanAnswer) -> None:
        self.state.answer_text = req.text

    @answer.validator
    def _check_answer(self, req: HumanAnswer) -> None:
        task_checks.check_answer(self.state, req)

    @workflow.update(name=SPAWN_UPDATE)
    async def spawn(self, req: SpawnAgentArgs) -> SpawnedChild:
        """Start a sub-agent on behalf of a client (SDK, API, MCP), paid from this task's budget."""
        return await self.sub_agents.spawn(req)

    @spawn.validator
    def _check_spawn(self, req: SpawnAgentArgs) -> None:
        task_checks.check_spawn(self.run_input, self.state, req)

    @workflow.signal(name=SIMULATE_PREEMPTION_SIGNAL)
    def simulate_preemption(self) -> None:
        """For authors testing their tools: the step's generation is cut off and resumes on another node."""
        self.fleet.preempt_requested = True

    @workflow.signal(name=NODE_GONE_SIGNAL)
    def node_gone(self, gone: NodeGone) -> None:
        """A node was revoked or removed: a step loading or generating there moves, and none goes there again."""
        self.fleet.node_gone(gone.node_id)

    @workflow.signal(name=CANCEL_SIGNAL)
    async def cancel(self, req: CancelRequest) -> None:
        """Stop: a running generation is cut, tool waits end, and running sub-agents are cancelled at once (the
        tree stops together, instead of the parent waiting for its children's answers first)."""
        if self.state.cancel_reason is not None:
            return
        self.state.cancel_reason = req.reason or "cancelled"
        if self.sub_agents.running:
            await self.sub_agents.cancel_all(f"parent {self.run_input.task_id} was cancelled")

    # ----- state ----------------------------------------------------------------------------
    def _state(self) -> TaskState:
        return task_state.snapshot(self.run_input, self.state, self.fleet.interruptions, workflow.now())

    async def _set_status(self, status: TaskStatus, spec_json: str | None = None) -> None:
        self.state.status = status
        await workflow.execute_local_activity(
            RECORD_STATE_ACTIVITY,
            RecordStateInput(state=self._state(), spec_json=spec_json),
            start_to_close_timeout=BOOKKEEPING_TIMEOUT,
            retry_policy=BOOKKEEPING_RETRY,
        )

    async def _finish(self, status: TaskStatus, error: str | None = None) -> TaskState:
        self.state.finishing = (
            True  # no new sub-agent from here: one started after the wait below would outlive the task
        )
        self.state.waiting_for, self.state.gpu_trouble = None, None
        await self._flush_pending()
        # A spawn still starting its child has carved the child's budget but not listed it as running yet: let it
        # finish, so that the child is cancelled or waited for below and its carve settled, never left reserved.
        await workflow.wait_condition(lambda: not self.sub_agents.starting)
        if self.sub_agents.running:
            # Sub-agents started from outside still run on this task's budget: settle them first.
            if status == TaskStatus.cancelled:
                await self.sub_agents.cancel_all(f"parent {self.run_input.task_id} was cancelled")
            self.state.waiting_for = "sub-agents to finish"
            await self.sub_agents.wait_all()
            self.state.waiting_for = None
        if status != TaskStatus.completed:
            self.state.error = error
        await self._set_status(status)
        return self._state()

    def _continuation(self) -> TaskRun:
        """The input of the next run: the same task, resumed from its last checkpoint."""
        fleet = self.fleet
        placements = fleet.placements_used if fleet.placements_step == self.state.steps_done + 1 else 0
        return task_state.continuation(self.run_input, self.state, fleet.interruptions, placements)


def _cause(err: BaseException) -> str:
    while err.__cause__ is not None:
        err = err.__cause__
    return str(err) or type(err).__name__


def _first_error(exc: ValidationError) -> str:
    e = exc.errors()[0]
    return f"{'.'.join(map(str, e['loc'])) or 'arguments'}: {e['msg']}"
