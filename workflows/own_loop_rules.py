"""What the calls of an author's own loop come to: pure functions of the task's state and what arrived.

The loop's process drives the task (docs/own-loop.md): its model calls, tool results, approvals and finish arrive
as updates. Whether a call is taken, what its result costs and answers, and whether the task must end (the loop
finished, fell silent, is out of budget past its grace, or the deadline passed) are decided here with no
Temporal call, so a unit test can hand them a TaskRunState; workflows/own_loop.py carries the verdicts out.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from temporalio.exceptions import ApplicationError

from sdk import TaskStatus
from sdk.wire.contracts import LlmStepResult, Shortfall
from sdk.wire.loop_approvals import ToolCallToApprove, approval_question
from sdk.wire.own_loop import LoopReply
from sdk.wire.task_run import TaskRun

from .budget import BudgetViolation
from .fleet_step import StepCut
from .loop_record import LoopRecord, awaiting_approval
from .step_outcomes import missing
from .task_state import Ending, TaskRunState


@dataclass(frozen=True)
class Refused:
    """The call gets `error`; `status`: the task's status to record first, when it changed."""

    error: ApplicationError
    status: TaskStatus | None = None


def ending(state: TaskRunState, run: TaskRun, now: datetime, busy: bool) -> Ending | None:
    """Why the task must end now, if it must (`busy`: a call is being answered; `now`: the event-fixed time)."""
    if state.loop_finished is not None:
        output, error = state.loop_finished
        if error is not None:
            return TaskStatus.failed, f"the task's own loop failed: {error}"
        state.result = output if output is not None else state.result
        return TaskStatus.completed, None
    if state.loop_over is not None:
        return state.loop_over
    if state.cancel_reason is not None:
        return TaskStatus.cancelled, state.cancel_reason
    deadline = run.spec.budget.deadline
    if deadline is not None and now >= deadline:
        return TaskStatus.out_of_budget, "deadline passed"
    if busy or awaiting_approval(state.own_loop):
        return None  # a call is being answered, or a person asked: the loop is not silent
    at = now.timestamp()
    if state.short_since is not None and not state.budget_raised and at - state.short_since >= run.budget_grace_s:
        return TaskStatus.out_of_budget, state.waiting_for
    assert state.loop_last_call_at is not None
    if at - state.loop_last_call_at >= run.agent.loop_idle_s:
        return TaskStatus.failed, (
            f"the task's own loop made no call for {run.agent.loop_idle_s:g} s"
            " (its process stopped?); run it again with the same task id to resume"
        )
    return None


def wait_s(state: TaskRunState, run: TaskRun, now: float) -> float:
    """Until the loop's silence (or the budget's grace) would end the task."""
    assert state.loop_last_call_at is not None and state.own_loop is not None
    agent = run.agent
    wait = state.loop_last_call_at + agent.loop_idle_s - now
    due = LoopRecord(state.own_loop).approval_due_at(agent.ask_human_timeout_s)
    if due is not None:  # a person is asked: the loop waits for them, not silent (its timer starts again after)
        wait = due - now
    if state.short_since is not None and not state.budget_raised:
        wait = min(wait, state.short_since + run.budget_grace_s - now)
    return max(wait, 0.001)


def refusal_before_call(state: TaskRunState, run: TaskRun, now: datetime) -> ApplicationError | None:
    """Why a model call is not taken at all (asked while it is being answered: the task is busy with it)."""
    if ending(state, run, now, busy=True) is not None:
        return ApplicationError("task: it is ending; it takes no more model calls", non_retryable=True)
    if awaiting_approval(state.own_loop):
        return ApplicationError(
            f"task: its loop's tool calls wait for approval ({state.waiting_for}); it takes no new model call"
            " until a person approved or rejected them",
            type="AwaitsApproval",
            non_retryable=True,
        )
    max_steps = run.agent.max_steps
    if state.steps_done >= max_steps:
        state.loop_over = TaskStatus.max_steps, f"reached max_steps={max_steps}"
        return ApplicationError(
            f"max_steps: the task made its {max_steps} model calls", type="MaxSteps", non_retryable=True
        )
    return None


def charge_call(
    state: TaskRunState, step: int, result: LlmStepResult | StepCut | None, now: float
) -> LoopReply | Refused:
    """Charge the call's generation: the reply for the loop, or why it gets none (`now`: the event-fixed time)."""
    if result is None:
        return Refused(
            ApplicationError(
                "task: it stopped waiting for a GPU (cancelled, or its deadline passed)", non_retryable=True
            )
        )
    if result.checkpoint is not None:
        state.checkpoint, state.pending = result.checkpoint, None
    if isinstance(result, StepCut):
        state.budget.charge(result.lost_tokens, result.cost_usd, lost=result.lost_tokens)
        return Refused(ApplicationError("task: it was cancelled during the call", non_retryable=True))
    if isinstance(result, Shortfall):
        state.budget.charge(result.tokens_charged, result.cost_usd, lost=result.lost_tokens)
        if state.short_since is None or state.budget_raised:  # a loop asking again does not extend the grace
            state.short_since = now
        state.budget_raised = False
        state.waiting_for = f"budget: {missing(result)}"
        error = ApplicationError(
            f"budget: the task needs {missing(result)} (raise its budget, then call again)",
            type="OutOfBudget",
            non_retryable=True,
        )
        return Refused(error, status=TaskStatus.awaiting_budget)
    try:
        state.budget.charge(result.tokens_charged, result.cost_usd, lost=result.lost_tokens)
    except BudgetViolation as violation:
        state.budget.book_overrun(result.tokens_charged, result.cost_usd, lost=result.lost_tokens)
        state.loop_over = TaskStatus.failed, f"step {step}: {violation}"
        return Refused(ApplicationError(f"budget: {violation}", type="BudgetViolation", non_retryable=True))
    return LoopReply(
        step=step,
        message=result.message,
        finish_reason=result.finish_reason,
        prompt_tokens=result.prompt_tokens,
        completion_tokens=result.completion_tokens,
        served_by=result.served_by,
    )


def approval_asked(state: TaskRunState, calls: list[ToolCallToApprove]) -> None:
    """The loop stopped at calls that need a person's word: the task asks for it."""
    state.question = approval_question(calls)
    state.waiting_for = "input: approval of " + ", ".join(c.tool for c in calls)
    state.status = TaskStatus.awaiting_input


def approvals_settled(state: TaskRunState, now: float) -> None:
    """No call waits for a person any more: the loop goes on, and its silence counts from now."""
    state.question, state.waiting_for = None, None
    state.loop_last_call_at = now
    if state.cancel_reason is None:
        state.status = TaskStatus.running
    state.loop_wakeups += 1
