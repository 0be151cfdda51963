"""Which updates a task takes: its handlers' validators, as pure functions of the run and its state.

An update a validator refuses leaves no event in the task's history, and its ApplicationError goes back to
the caller (the API turns it into a 4xx naming the field). They read the state and never change it.
"""

from __future__ import annotations

from temporalio.exceptions import ApplicationError

from sdk import TaskStatus
from sdk.wire.builtins import SpawnAgentArgs
from sdk.wire.contracts import HumanAnswer, RaiseBudget, RaiseChildBudget
from sdk.wire.task_run import TaskRun

from .loop_record import awaiting_approval
from .task_state import TaskRunState


def check_raise(run: TaskRun, state: TaskRunState, req: RaiseBudget) -> None:
    if run.parent_task_id is not None:
        raise ApplicationError(
            f"task_id: {run.task_id} is a sub-agent of {run.parent_task_id}; its budget grows only out of its"
            " parent's remainder, through the parent"
        )
    if state.status.is_final:
        raise ApplicationError(f"task is {state.status.value}; its budget can no longer change")
    if req.tokens <= 0 and req.usd <= 0:
        raise ApplicationError("tokens: raise by at least one token (or usd by more than 0)")
    if req.usd > 0 and state.budget.usd_limit is None:
        raise ApplicationError("usd: this task has no dollar limit to raise")


def check_raise_child(state: TaskRunState, req: RaiseChildBudget) -> None:
    """The task's side; whether the child runs and the remainder pays is SubAgents.check_raise's."""
    if state.status.is_final:
        raise ApplicationError(f"task is {state.status.value}; its sub-agents' budgets can no longer change")
    if req.tokens <= 0 and req.usd <= 0:
        raise ApplicationError("tokens: raise by at least one token (or usd by more than 0)")


def check_answer(state: TaskRunState, req: HumanAnswer) -> None:
    if state.status != TaskStatus.awaiting_input:
        raise ApplicationError(f"task is {state.status.value}, not awaiting_input; nothing to answer")
    if awaiting_approval(state.own_loop):
        raise ApplicationError(
            "task: its loop waits for tool calls to be approved or rejected, not for an answer"
            " (approve or reject them: `berth approve`, `berth reject`)",
            type="AwaitsApproval",
        )


def check_spawn(run: TaskRun, state: TaskRunState, req: SpawnAgentArgs) -> None:
    if state.status.is_final or state.cancel_reason is not None or state.finishing:
        now = state.status.value if state.status.is_final or not state.finishing else "finishing"
        raise ApplicationError(f"task is {now}; it can no longer start sub-agents")
    # A client (a task token, the SDK) asking for more than remains is refused with the numbers,
    # rather than given less than it asked for without knowing (as the model's own spawn tool is).
    remaining = state.budget.token_allowance
    if req.tokens is not None and req.tokens > remaining:
        spend = state.budget.spend()
        raise ApplicationError(
            f"budget.tokens: asked for {req.tokens} tokens, but only {remaining} remain of task"
            f" {run.task_id}'s budget ({spend.token_limit} limit, {spend.tokens_used} used,"
            f" {spend.reserved_for_children} reserved for sub-agents)"
        )


def check_own_loop_open(run: TaskRun, state: TaskRunState) -> None:
    """Any update of an own loop: the task runs one, and it has not ended."""
    if state.own_loop is None:
        raise ApplicationError(
            f"task_id: task {run.task_id}'s agent {run.agent.name} runs Berth's"
            " loop; only a task whose agent has loop='own' takes calls from its own loop"
        )
    if state.status.is_final or state.finishing:
        raise ApplicationError(
            f"task is {state.status.value if state.status.is_final else 'finishing'}; it takes nothing more from its loop"
        )
