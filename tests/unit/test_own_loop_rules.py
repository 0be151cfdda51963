"""An own loop's calls as pure functions of the task's state (workflows/own_loop_rules.py), with no Temporal
server: when the task ends (finished, silent, out of budget past its grace, past its deadline), which call is
refused, what a call's generation costs and answers, and what approvals do to the task."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sdk import AgentSpec, Budget, CheckpointRef, Message, TaskSpec, TaskStatus
from sdk.wire.contracts import Reply, Shortfall
from sdk.wire.loop_approvals import LoopApprovals, ToolCallToApprove
from sdk.wire.own_loop import LoopReply
from sdk.wire.task_run import CURRENT_WORKFLOW_VERSION, TaskRun
from workflows import own_loop_rules, task_state
from workflows.fleet_step import StepCut
from workflows.own_loop_rules import Refused
from workflows.task_state import TaskRunState

T0 = datetime(2026, 12, 6, 8, 0, tzinfo=UTC)
CHECKPOINT = CheckpointRef(id=1, seq=1, step=1, hash="h")


def make_run(tokens: int = 10_000, **agent: object) -> TaskRun:
    spec = TaskSpec(task_id="t-2", agent="looper", input="Plan a trip.", budget=Budget(tokens))
    return TaskRun(
        task_id="t-2",
        spec=spec,
        agent=AgentSpec(name="looper", model="llama-3.1-8b", loop="own", loop_idle_s=60, **agent),
        submitted_at=T0,
        budget_grace_s=300,
        workflow_version=CURRENT_WORKFLOW_VERSION,
    )


def started(run: TaskRun) -> TaskRunState:
    state = task_state.begin(run)
    state.loop_last_call_at = T0.timestamp()
    return state


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_a_finished_loop_ends_the_task_with_its_output_or_its_error() -> None:
    run = make_run()
    state = started(run)
    state.loop_finished = ("done", None)
    assert own_loop_rules.ending(state, run, T0, busy=False) == (TaskStatus.completed, None)
    assert state.result == "done"
    state.loop_finished = (None, "crashed")
    assert own_loop_rules.ending(state, run, T0, busy=False) == (
        TaskStatus.failed,
        "the task's own loop failed: crashed",
    )


def test_a_silent_loop_fails_the_task_unless_a_call_is_being_answered() -> None:
    run = make_run()
    state = started(run)
    assert own_loop_rules.ending(state, run, at(59), busy=False) is None
    assert own_loop_rules.ending(state, run, at(60), busy=True) is None
    ending = own_loop_rules.ending(state, run, at(60), busy=False)
    assert ending is not None and ending[0] == TaskStatus.failed and "made no call for 60 s" in (ending[1] or "")


def test_a_short_budget_ends_the_task_after_its_grace_unless_raised() -> None:
    run = make_run()
    state = started(run)
    state.short_since, state.waiting_for = at(10).timestamp(), "budget: 5 more tokens for the next step"
    state.loop_last_call_at = at(300).timestamp()  # the loop keeps calling: it is not silent
    assert own_loop_rules.ending(state, run, at(309), busy=False) is None
    assert own_loop_rules.ending(state, run, at(310), busy=False) == (
        TaskStatus.out_of_budget,
        "budget: 5 more tokens for the next step",
    )
    state.budget_raised = True
    assert own_loop_rules.ending(state, run, at(310), busy=False) is None


def test_the_wait_ends_at_the_loops_silence_or_the_budgets_grace() -> None:
    run = make_run()
    state = started(run)
    assert own_loop_rules.wait_s(state, run, at(20).timestamp()) == 40
    state.short_since = at(-290).timestamp()
    assert own_loop_rules.wait_s(state, run, at(0).timestamp()) == 10
    assert own_loop_rules.wait_s(state, run, at(100).timestamp()) == 0.001  # Temporal needs a positive timeout


def test_a_call_past_max_steps_is_refused_and_ends_the_task() -> None:
    run = make_run(max_steps=2)
    state = started(run)
    assert own_loop_rules.refusal_before_call(state, run, T0) is None
    state.steps_done = 2
    refused = own_loop_rules.refusal_before_call(state, run, T0)
    assert refused is not None and refused.type == "MaxSteps"
    assert state.loop_over == (TaskStatus.max_steps, "reached max_steps=2")
    assert own_loop_rules.refusal_before_call(state, run, T0) is not None  # the task is ending now


def test_a_call_while_tool_calls_wait_for_approval_is_refused() -> None:
    run = make_run()
    state = started(run)
    assert state.own_loop is not None
    calls = [ToolCallToApprove(call_id="c1", tool="rm", arguments="{}")]
    state.own_loop.approvals = LoopApprovals(calls=calls, run_state="{}", asked_at=T0.timestamp())
    own_loop_rules.approval_asked(state, calls)
    assert state.status == TaskStatus.awaiting_input and state.waiting_for == "input: approval of rm"
    refused = own_loop_rules.refusal_before_call(state, run, T0)
    assert refused is not None and refused.type == "AwaitsApproval"
    own_loop_rules.approvals_settled(state, at(5).timestamp())
    assert (state.status, state.question, state.waiting_for) == (TaskStatus.running, None, None)
    assert state.loop_last_call_at == at(5).timestamp() and state.loop_wakeups == 1


def test_a_generated_reply_is_charged_and_answered() -> None:
    state = started(make_run())
    message = Message(role="assistant", content="Day 1: ...")
    reply = Reply(message=message, prompt_tokens=50, completion_tokens=10, served_by="node-a", checkpoint=CHECKPOINT)
    answer = own_loop_rules.charge_call(state, 3, reply, T0.timestamp())
    assert answer == LoopReply(step=3, message=message, prompt_tokens=50, completion_tokens=10, served_by="node-a")
    assert state.budget.tokens_used == 60 and state.checkpoint == CHECKPOINT


def test_a_short_call_records_awaiting_budget_and_keeps_its_grace_when_asked_again() -> None:
    state = started(make_run())
    short = Shortfall(shortfall_tokens=80, checkpoint=CHECKPOINT)
    refused = own_loop_rules.charge_call(state, 3, short, at(1).timestamp())
    assert isinstance(refused, Refused) and refused.status == TaskStatus.awaiting_budget
    assert refused.error.type == "OutOfBudget" and "80 more tokens" in refused.error.message
    assert state.waiting_for == "budget: 80 more tokens for the next step"
    own_loop_rules.charge_call(state, 3, short, at(9).timestamp())
    assert state.short_since == at(1).timestamp()  # a loop asking again does not extend the grace


def test_a_cut_or_missing_generation_is_refused() -> None:
    state = started(make_run())
    cut = own_loop_rules.charge_call(state, 1, StepCut(lost_tokens=7, cost_usd=0.0, checkpoint=None), 0.0)
    assert isinstance(cut, Refused) and "cancelled during the call" in cut.error.message
    assert state.budget.tokens_lost == 7
    none = own_loop_rules.charge_call(state, 1, None, 0.0)
    assert isinstance(none, Refused) and "stopped waiting for a GPU" in none.error.message


def test_a_reply_beyond_the_allowance_ends_the_task() -> None:
    state = started(make_run(tokens=20))
    reply = Reply(message=Message(role="assistant", content="x"), prompt_tokens=50, checkpoint=CHECKPOINT)
    refused = own_loop_rules.charge_call(state, 2, reply, 0.0)
    assert isinstance(refused, Refused) and refused.error.type == "BudgetViolation"
    assert state.loop_over is not None and state.loop_over[0] == TaskStatus.failed
    assert state.budget.tokens_used == 50
