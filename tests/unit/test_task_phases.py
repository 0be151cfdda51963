"""The phases of a task's step as pure functions of its state and the step's outcome, called with no Temporal
server: what a reply, a shortfall or a cut generation does to the budget and the task (workflows/step_outcomes.py),
which updates a task takes (task_checks.py), and the state a run starts from and hands on (task_state.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from temporalio.exceptions import ApplicationError

from sdk import AgentSpec, Budget, CheckpointRef, Message, TaskSpec, TaskStatus, ToolCall
from sdk.wire.builtins import SpawnAgentArgs
from sdk.wire.contracts import HumanAnswer, PendingStep, RaiseBudget, RaiseChildBudget, Reply, Shortfall
from sdk.wire.output import MAX_OUTPUT_REPAIRS
from sdk.wire.task_run import CURRENT_WORKFLOW_VERSION, CarriedProgress, TaskRun
from workflows import step_outcomes, task_checks, task_state
from workflows.fleet_step import StepCut
from workflows.step_outcomes import End, GoOn, RunTools, WaitForBudget
from workflows.task_state import TaskRunState

T0 = datetime(2026, 12, 6, 8, 0, tzinfo=UTC)
CHECKPOINT = CheckpointRef(id=7, seq=3, step=2, hash="h")


def make_run(tokens: int = 10_000, usd: float | None = None, **agent: object) -> TaskRun:
    spec = TaskSpec(task_id="t-1", agent="helper", input="What is 2 + 2?", budget=Budget(tokens, usd=usd))
    return TaskRun(
        task_id="t-1",
        spec=spec,
        agent=AgentSpec(name="helper", model="llama-3.1-8b", **agent),
        submitted_at=T0,
        workflow_version=CURRENT_WORKFLOW_VERSION,
    )


def reply(content: str | None = "4", *, tool_calls: list[ToolCall] | None = None, **fields: object) -> Reply:
    values: dict = {"prompt_tokens": 100, "completion_tokens": 20, "checkpoint": CHECKPOINT} | fields
    return Reply(message=Message(role="assistant", content=content, tool_calls=tool_calls), **values)


def pending() -> PendingStep:
    return PendingStep(step=1, new_messages=[], state=task_state.snapshot(make_run(), begin(), 0, T0))


def begin(run: TaskRun | None = None) -> TaskRunState:
    return task_state.begin(run or make_run())


# ----- settle: what a step's result does ----------------------------------------------------------------------
def test_no_result_goes_on_without_touching_the_state() -> None:
    state = begin()
    assert step_outcomes.settle(state, make_run().agent, 1, None) == GoOn()
    assert state.budget.tokens_used == 0


def test_a_final_answer_is_charged_and_ends_the_task_with_its_step_done() -> None:
    state = begin()
    state.pending = pending()
    outcome = step_outcomes.settle(state, make_run().agent, 1, reply("4", lost_tokens=5))
    assert isinstance(outcome, End)
    assert outcome.ending == (TaskStatus.completed, None)
    assert outcome.done is not None and [m.content for m in outcome.done] == ["4"]
    assert state.result == "4"
    assert (state.budget.tokens_used, state.budget.tokens_lost) == (125, 5)
    assert state.checkpoint == CHECKPOINT and state.pending is None  # the reply's activity wrote the pending step


def test_tool_calls_are_run_before_the_step_ends() -> None:
    call = ToolCall(id="c1", name="look", arguments="{}")
    outcome = step_outcomes.settle(begin(), make_run().agent, 1, reply(None, tool_calls=[call]))
    assert isinstance(outcome, RunTools)
    assert outcome.reply.tool_calls == [call]


def test_a_shortfall_waits_for_budget_and_says_what_it_needs() -> None:
    state = begin()
    short = Shortfall(shortfall_tokens=300, lost_tokens=40, checkpoint=CHECKPOINT)
    outcome = step_outcomes.settle(state, make_run().agent, 2, short)
    assert outcome == WaitForBudget(
        "300 more tokens for the next step",
        (TaskStatus.out_of_budget, "needed 300 more tokens for the next step"),
    )
    assert (state.budget.tokens_used, state.budget.tokens_lost) == (40, 40)


def test_a_dollar_shortfall_names_dollars() -> None:
    short = Shortfall(shortfall_tokens=0, shortfall_usd=0.0125, checkpoint=CHECKPOINT)
    assert step_outcomes.missing(short) == "$0.012500 more for the next step"


def test_a_generation_cut_by_the_cancel_charges_what_it_wrote_as_lost() -> None:
    state = begin()
    outcome = step_outcomes.settle(state, make_run().agent, 1, StepCut(lost_tokens=33, cost_usd=0.0, checkpoint=None))
    assert outcome == GoOn()
    assert (state.budget.tokens_used, state.budget.tokens_lost) == (33, 33)


def test_a_reply_beyond_the_allowance_is_booked_and_fails_the_task() -> None:
    state = begin(make_run(tokens=50))
    outcome = step_outcomes.settle(state, make_run().agent, 4, reply("4"))
    assert isinstance(outcome, End)
    assert outcome.ending[0] == TaskStatus.failed
    assert outcome.ending[1] == "step 4: charge of 120 tokens exceeds the allowance of 50"
    assert state.budget.tokens_used == 120  # the spend stays truthful


def test_an_answer_the_budget_cut_short_is_kept_and_waits_for_more() -> None:
    run = make_run(tokens=1_000, max_tokens_per_step=256)
    state = begin(run)
    cut = reply("The answer is", finish_reason="length", budget_limited=True, prompt_tokens=600, completion_tokens=300)
    outcome = step_outcomes.settle(state, run.agent, 1, cut)
    assert isinstance(outcome, WaitForBudget)
    assert outcome.otherwise == (TaskStatus.out_of_budget, "the answer was cut short by the budget")
    assert outcome.done is not None and outcome.done[0].content == "The answer is"
    assert state.result == "The answer is"
    assert outcome.missing.endswith("for a full 256-token answer)")
    least, full = (int(w) for w in outcome.missing.replace("(up to ", "").split() if w.isdigit())
    assert 1 <= least <= full


def test_an_answer_off_its_output_schema_asks_for_repairs_then_fails() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    run = make_run(output_schema=schema)
    state = begin(run)
    for repair in range(1, MAX_OUTPUT_REPAIRS + 1):
        outcome = step_outcomes.settle(state, run.agent, repair, reply("four"))
        assert isinstance(outcome, GoOn)
        assert outcome.done is not None and outcome.done[-1].role == "user"  # the repair request joins the step
        assert (state.output_repairs, state.repairing) == (repair, True)
    outcome = step_outcomes.settle(state, run.agent, MAX_OUTPUT_REPAIRS + 1, reply("four"))
    assert isinstance(outcome, End) and outcome.ending[0] == TaskStatus.failed
    assert "does not match the agent's output type" in (outcome.ending[1] or "")


def test_an_answer_in_its_output_schema_completes_as_json() -> None:
    run = make_run(output_schema={"type": "object", "required": ["n"]})
    state = begin(run)
    outcome = step_outcomes.settle(state, run.agent, 1, reply('```json\n{"n": 4}\n```'))
    assert isinstance(outcome, End) and outcome.ending == (TaskStatus.completed, None)
    assert state.result == '{"n": 4}' and not state.repairing


# ----- reason_to_stop ------------------------------------------------------------------------------------------
def test_reasons_to_stop_in_their_order() -> None:
    run = make_run(max_steps=3)
    state = begin(run)
    assert step_outcomes.reason_to_stop(state, run, None, T0) is None
    state.steps_done = 3
    assert step_outcomes.reason_to_stop(state, run, None, T0) == (TaskStatus.max_steps, "reached max_steps=3")
    state.cancel_reason = "enough"
    assert step_outcomes.reason_to_stop(state, run, None, T0) == (TaskStatus.cancelled, "enough")
    assert step_outcomes.reason_to_stop(state, run, "sub-agent x: over", T0) == (
        TaskStatus.failed,
        "budget violation: sub-agent x: over",
    )


def test_the_deadline_stops_a_task_at_the_event_fixed_time() -> None:
    run = make_run()
    run.spec.budget.deadline = T0 + timedelta(minutes=1)
    state = begin(run)
    assert step_outcomes.reason_to_stop(state, run, None, T0) is None
    assert step_outcomes.reason_to_stop(state, run, None, T0 + timedelta(minutes=1)) == (
        TaskStatus.out_of_budget,
        "deadline passed",
    )


def test_call_settings_ask_for_the_schema_only_where_the_call_can_only_answer() -> None:
    schema = {"type": "object"}
    run = make_run(output_schema=schema).model_copy(update={"output_format_native": True})
    assert "response_format" in step_outcomes.call_settings(run, [])
    assert "response_format" not in step_outcomes.call_settings(run, [{"type": "function"}])


# ----- task_checks ---------------------------------------------------------------------------------------------
def test_a_sub_agent_cannot_raise_its_own_budget() -> None:
    run = make_run().model_copy(update={"parent_task_id": "p-1"})
    with pytest.raises(ApplicationError, match="is a sub-agent of p-1"):
        task_checks.check_raise(run, begin(run), RaiseBudget(tokens=10))


def test_a_raise_is_checked_against_the_task() -> None:
    run = make_run()
    state = begin(run)
    task_checks.check_raise(run, state, RaiseBudget(tokens=10))
    with pytest.raises(ApplicationError, match="no dollar limit"):
        task_checks.check_raise(run, state, RaiseBudget(usd=1.0))
    with pytest.raises(ApplicationError, match="at least one token"):
        task_checks.check_raise(run, state, RaiseBudget(tokens=0))
    state.status = TaskStatus.completed
    with pytest.raises(ApplicationError, match="task is completed"):
        task_checks.check_raise(run, state, RaiseBudget(tokens=10))
    with pytest.raises(ApplicationError, match="sub-agents' budgets"):
        task_checks.check_raise_child(state, RaiseChildBudget(child_task_id="c", tokens=1))


def test_an_answer_is_taken_only_while_a_person_is_asked() -> None:
    state = begin()
    state.status = TaskStatus.running
    with pytest.raises(ApplicationError, match="not awaiting_input"):
        task_checks.check_answer(state, HumanAnswer(text="yes"))
    state.status = TaskStatus.awaiting_input
    task_checks.check_answer(state, HumanAnswer(text="yes"))


def test_a_spawn_asking_for_more_than_remains_is_refused_with_the_numbers() -> None:
    run = make_run(tokens=1_000)
    state = begin(run)
    state.budget.charge(400)
    with pytest.raises(ApplicationError, match="only 600 remain of task t-1's budget"):
        task_checks.check_spawn(run, state, SpawnAgentArgs(agent="helper", input="x", tokens=601))
    state.finishing = True
    with pytest.raises(ApplicationError, match="task is finishing"):
        task_checks.check_spawn(run, state, SpawnAgentArgs(agent="helper", input="x"))


def test_berths_loop_takes_no_own_loop_update() -> None:
    run = make_run()
    with pytest.raises(ApplicationError, match="runs Berth's loop"):
        task_checks.check_own_loop_open(run, begin(run))


# ----- task_state: the one value, begun and carried on ---------------------------------------------------------
def test_a_continuation_carries_the_state_the_next_run_begins_from() -> None:
    run = make_run(tokens=5_000, usd=2.0, loop="own")
    state = begin(run)
    assert state.own_loop is not None and state.own_loop.length == 1  # the task's input opens its conversation
    state.budget.charge(700, 0.25, lost=30)
    state.budget.raise_limit(1_000)
    state.steps_done, state.checkpoint = 4, CHECKPOINT
    state.children.append("t-1~x.1.abcd")
    following = task_state.continuation(run, state, interruptions=2, placements_of_next_step=1)
    assert following.resume_from == CHECKPOINT and following.workflow_version == CURRENT_WORKFLOW_VERSION
    assert following.carried == CarriedProgress(
        tokens_used=700,
        usd_used=0.25,
        steps_done=4,
        interruptions=2,
        children=["t-1~x.1.abcd"],
        token_limit=6_000,
        usd_limit=2.0,
        tokens_lost=30,
        placements_of_next_step=1,
        own_loop=state.own_loop,
    )
    again = task_state.begin(TaskRun.model_validate_json(following.model_dump_json()))  # through history's JSON
    assert again.budget == state.budget and again.steps_done == 4 and again.children == state.children
    assert again.checkpoint == CHECKPOINT and again.own_loop == state.own_loop


def test_the_snapshot_shows_the_state_and_the_state_serialises() -> None:
    run = make_run()
    state = begin(run)
    state.status, state.waiting_for, state.steps_done = TaskStatus.awaiting_budget, "budget: 9 more tokens", 2
    shown = task_state.snapshot(run, state, interruptions=1, now=T0)
    assert (shown.status, shown.step, shown.interruptions, shown.waiting_for) == (
        TaskStatus.awaiting_budget,
        2,
        1,
        "budget: 9 more tokens",
    )
    assert shown.spend == state.budget.spend() and shown.updated_at == T0
    assert TaskRunState.model_validate_json(state.model_dump_json()) == state
