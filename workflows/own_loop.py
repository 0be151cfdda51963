"""The author's own loop: the task answers the model calls its loop's process sends, one at a time.

An agent with loop='own' runs its loop in the author's process (docs/own-loop.md); each model call arrives as an
update and runs as a step of this task (reserved, placed, booked: `TaskActions.generate`), its tool results,
approvals and finish as other updates. Meanwhile the run only waits: for a call, for a decision on tool calls that
wait for a person, or for the loop's silence or the budget's grace to end the task. What a call may do and what
its generation comes to are pure functions of the task's state (own_loop_rules.py); the record of the calls
answered, for a loop that re-runs after a crash, is loop_record.py's.
"""

from __future__ import annotations

import asyncio

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from sdk import TaskState, TaskStatus
    from sdk.wire.contracts import PendingStep
    from sdk.wire.loop_approvals import ApprovalDecision, ApprovalRequest, LoopApprovals
    from sdk.wire.own_loop import LoopCall, LoopFinish, LoopReply, LoopToolResult
    from sdk.wire.task_events import ApprovalAsked, ApprovalDecided

    from . import own_loop_rules
    from .fleet_step import Unplaceable
    from .loop_record import LoopRecord
    from .own_loop_rules import Refused
    from .step_outcomes import cause_of
    from .task_actions import TaskActions
    from .task_state import Ending


class OwnLoop:
    def __init__(self, task: TaskActions) -> None:
        assert task.state.own_loop is not None  # a task whose agent has loop='own'
        self.task = task
        self.state = task.state
        self.agent = task.agent
        self.clock = task.clock
        self.record = LoopRecord(task.state.own_loop)
        self.lock = asyncio.Lock()  # one call at a time

    async def serve(self) -> TaskState:
        """Answer the loop's calls (updates) until it finishes, falls silent, runs out of budget or is stopped."""
        task, state, record = self.task, self.state, self.record
        state.loop_last_call_at = self.clock.time()
        while True:
            due = record.approval_due_at(self.agent.ask_human_timeout_s)
            if due is not None and self.clock.time() >= due and state.cancel_reason is None:
                reason = f"no decision arrived within {self.agent.ask_human_timeout_s:g} s"
                await self._decide(ApprovalDecision(approve=False, reason=reason))
            ending = self._ending()
            if ending is not None:
                await workflow.wait_condition(lambda: not self.lock.locked())
                return await task.finish(*ending)
            # Not while a person is asked: the question and status would have to be carried too, for a wait that
            # adds a handful of events to the history.
            if self.clock.continue_as_new_suggested() and not self.lock.locked() and not record.awaiting_approval:
                await task.continue_as_new()
            seen = state.loop_wakeups
            wait_s = own_loop_rules.wait_s(state, task.run, workflow.time())
            try:
                await workflow.wait_condition(
                    lambda: state.loop_wakeups != seen or state.cancel_reason is not None,  # noqa: B023  (awaited here)
                    timeout=task.until_deadline(wait_s),
                )
            except TimeoutError:
                self.clock.mark()  # the timer fired: a moment history fixes (a wakeup may follow a local activity)

    def _ending(self) -> Ending | None:
        return own_loop_rules.ending(self.state, self.task.run, self.clock.now(), busy=self.lock.locked())

    # ----- what the loop sends (the workflow's updates) ------------------------------------------------------------
    async def call(self, call: LoopCall) -> LoopReply:
        """One model call of the loop, run as a step of this task; the same call again (a loop re-run after a
        crash) gets its reply back without a new generation."""
        self.clock.mark()  # the update's arrival: a moment history fixes
        async with self.lock:
            replayed = self.record.answered(call)
            if replayed is not None:
                return replayed
            self.record.check_extends(call)
            try:
                return await self._step(call)
            finally:
                self.state.loop_last_call_at = self.clock.time()
                self.state.loop_wakeups += 1

    async def _step(self, call: LoopCall) -> LoopReply:
        task, state = self.task, self.state
        refused = own_loop_rules.refusal_before_call(state, task.run, self.clock.now())
        if refused is not None:
            raise refused
        step = state.steps_done + 1
        self.record.absorb(call.new_messages)
        if call.new_messages:  # what the loop added (its tool results, its own turns) goes with the step's input
            if state.pending is not None:
                state.pending.new_messages.extend(call.new_messages)
            else:
                state.pending = PendingStep(
                    step=state.steps_done, new_messages=list(call.new_messages), state=task.snapshot()
                )
        try:
            reply = await task.generate(step, call)
        except (ActivityError, Unplaceable) as exc:
            message = f"step {step}: model call failed: {cause_of(exc) if isinstance(exc, ActivityError) else exc}"
            state.loop_over = TaskStatus.failed, message
            raise ApplicationError(message, type="ModelCallFailed", non_retryable=True) from None
        answer = own_loop_rules.charge_call(state, step, reply, self.clock.time())
        if state.pending is None:  # the step wrote its predecessor: the conversation so far is in the store
            self.record.forget_written()
        if isinstance(answer, Refused):
            if answer.status is not None:
                await task.set_status(answer.status)
            raise answer.error
        self.record.take(call, answer)
        state.result = answer.answer.content or state.result
        task.step_done(step, [answer.answer])
        if state.short_since is not None:
            state.short_since, state.waiting_for = None, None
            await task.set_status(TaskStatus.running)
        return answer

    def tool_result(self, result: LoopToolResult) -> None:
        """Keep a tool's result, so that the loop re-run after a crash gets it back instead of running it again."""
        self.record.record_tool_result(result)

    def finish(self, finish: LoopFinish) -> None:
        if self.state.loop_finished is None:
            self.state.loop_finished = finish.output, finish.error
            self.state.loop_wakeups += 1

    async def ask_approval(self, request: ApprovalRequest) -> LoopApprovals:
        """The loop stopped at tool calls that need a person's word: the task waits awaiting_input with a
        question naming them, holding the loop's state until each call is approved or rejected."""
        self.clock.mark()  # the update's arrival: a moment history fixes
        if self.record.ask_approval(request, self.clock.time()):
            own_loop_rules.approval_asked(self.state, request.calls)
            await self.task.record_event(ApprovalAsked(calls=request.calls, trace_id=request.trace_id))
            self.state.loop_wakeups += 1
        assert self.record.progress.approvals is not None
        return self.record.progress.approvals

    async def decide(self, decision: ApprovalDecision) -> LoopApprovals:
        """A person approved or rejected a waiting call (or all of them); once none waits, the loop resumes."""
        self.clock.mark()
        await self._decide(decision)
        assert self.record.progress.approvals is not None
        return self.record.progress.approvals

    async def _decide(self, decision: ApprovalDecision) -> None:
        decided = self.record.decide(decision)
        if not self.record.awaiting_approval:
            own_loop_rules.approvals_settled(self.state, self.clock.time())  # the loop's silence counts from here
        await self.task.record_event(
            ApprovalDecided(call_ids=decided, approved=decision.approve, reason=decision.reason)
        )
