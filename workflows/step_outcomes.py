"""What a step of Berth's own loop comes to: pure functions of the task's state and the step's outcome.

The model call's result (a reply, a shortfall, a generation the cancel cut, or none: the task stopped waiting
for a GPU) is charged to the budget here and turned into what the loop does next, one outcome type each: go on,
wait for budget, run the reply's tool calls, or end the task. No Temporal call happens here, so a unit test
hands a TaskRunState and a result to `settle` and reads the verdict; workflows/berth_loop.py carries it out.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sdk import AgentSpec, Message, TaskStatus
from sdk.wire.contracts import LlmStepResult, Reply, Shortfall
from sdk.wire.limits import MIN_ANSWER_TOKENS
from sdk.wire.output import MAX_OUTPUT_REPAIRS, answer_json, answer_problem, repair_request, response_format
from sdk.wire.reserve import prompt_reserve, tokens_short
from sdk.wire.task_run import TaskRun

from .budget import BudgetViolation
from .fleet_step import StepCut
from .task_state import Ending, TaskRunState

# What a message adds to a prompt beyond its content in OpenAI's count (its role and separators: 3, and 1 to spare).
MESSAGE_OVERHEAD_TOKENS = 4


@dataclass(frozen=True)
class GoOn:
    """The next step follows; `done`: the messages this step ended with, when it ended."""

    done: list[Message] | None = None


@dataclass(frozen=True)
class WaitForBudget:
    """The task waits for a raise of `missing`; `otherwise`: how it ends when none comes in time."""

    missing: str
    otherwise: Ending
    done: list[Message] | None = None


@dataclass(frozen=True)
class RunTools:
    """The reply asked for tools: the step ends once they answered."""

    reply: Reply


@dataclass(frozen=True)
class End:
    ending: Ending
    done: list[Message] | None = None


StepOutcome = GoOn | WaitForBudget | RunTools | End


def settle(state: TaskRunState, agent: AgentSpec, step: int, result: LlmStepResult | StepCut | None) -> StepOutcome:
    """Charge the step's call and say what follows. The caller records a step that is `done` first (its checkpoint
    shows the task as this leaves it), then acts on the outcome."""
    if result is None:
        return GoOn()  # stopped waiting for a GPU: cancelled, or the deadline passed
    if result.checkpoint is not None:
        state.checkpoint, state.pending = result.checkpoint, None
    if isinstance(result, StepCut):  # the task's cancellation cut the generation: what it wrote was served
        state.budget.charge(result.lost_tokens, result.cost_usd, lost=result.lost_tokens)
        return GoOn()
    if isinstance(result, Shortfall):
        state.budget.charge(result.tokens_charged, result.cost_usd, lost=result.lost_tokens)
        short = missing(result)
        return WaitForBudget(short, (TaskStatus.out_of_budget, f"needed {short}"))
    try:
        state.budget.charge(result.tokens_charged, result.cost_usd, lost=result.lost_tokens)
    except BudgetViolation as violation:
        state.budget.book_overrun(result.tokens_charged, result.cost_usd, lost=result.lost_tokens)
        return End((TaskStatus.failed, f"step {step}: {violation}"))
    return answered(state, agent, result)


def answered(state: TaskRunState, agent: AgentSpec, reply: Reply) -> StepOutcome:
    """A charged reply: a partial answer cut by the budget waits for more, a final one ends, tools run."""
    if reply.finish_reason == "length" and reply.budget_limited and not reply.tool_calls:
        # The answer was cut because the budget shrank max_tokens: keep it as the partial
        # result and wait for more budget rather than calling a truncated reply done.
        state.result = reply.message.content or state.result
        short = shortfall_after_cut(state, agent, reply)
        return WaitForBudget(
            short, (TaskStatus.out_of_budget, "the answer was cut short by the budget"), [reply.message]
        )
    if not reply.tool_calls:
        state.result = reply.message.content or ""
        new_messages = [reply.message]
        verdict = final(state, agent, new_messages)
        return GoOn(done=new_messages) if verdict is None else End(verdict, done=new_messages)
    return RunTools(reply)


def final(state: TaskRunState, agent: AgentSpec, new_messages: list[Message]) -> Ending | None:
    """A final answer ends the task, once it matches the agent's output schema; an answer that does not asks
    for a repair step (MAX_OUTPUT_REPAIRS at most, each paid from the budget: its request joins `new_messages`),
    then fails the task."""
    schema = agent.output_schema
    problem = None if schema is None else answer_problem(state.result or "", schema)
    state.repairing = problem is not None
    if schema is not None and problem is None:
        state.result = answer_json(state.result or "")
    if problem is not None and schema is not None and state.output_repairs < MAX_OUTPUT_REPAIRS:
        state.output_repairs += 1
        new_messages.append(Message(role="user", content=repair_request(problem, schema)))
        return None
    if problem is not None:
        return TaskStatus.failed, (
            f"the answer does not match the agent's output type after {MAX_OUTPUT_REPAIRS} repair step(s): {problem}"
        )
    return TaskStatus.completed, None


def reason_to_stop(state: TaskRunState, run: TaskRun, violation: str | None, now: datetime) -> Ending | None:
    """Why the task must end before its next step, if it must (`violation`: a sub-agent's spend beyond its carve;
    `now`: the task's event-fixed time)."""
    if violation is not None:
        return TaskStatus.failed, f"budget violation: {violation}"
    if state.cancel_reason is not None:
        return TaskStatus.cancelled, state.cancel_reason
    if state.steps_done >= run.agent.max_steps:
        return TaskStatus.max_steps, f"reached max_steps={run.agent.max_steps}"
    deadline = run.spec.budget.deadline
    if deadline is not None and now >= deadline:
        return TaskStatus.out_of_budget, "deadline passed"
    return None


def missing(shortfall: Shortfall) -> str:
    """What a step is short of, as the task's waiting_for and its ending say it."""
    if shortfall.shortfall_usd is not None:
        return f"${shortfall.shortfall_usd:.6f} more for the next step"
    return f"{shortfall.shortfall_tokens} more tokens for the next step"


def shortfall_after_cut(state: TaskRunState, agent: AgentSpec, reply: Reply) -> str:
    """What the next step is short of, as the step would reserve it: its prompt (this conversation, the cut
    answer included) with the template margin, and at least a minimum answer (at most a full one)."""
    prompt = prompt_reserve(reply.prompt_tokens + reply.kept_tokens + reply.completion_tokens + MESSAGE_OVERHEAD_TOKENS)
    allowance = state.budget.token_allowance
    least = max(1, tokens_short(prompt, MIN_ANSWER_TOKENS, allowance))
    full = max(least, tokens_short(prompt, agent.max_tokens_per_step, allowance))
    return f"{least} more tokens for the next step (up to {full} for a full {agent.max_tokens_per_step}-token answer)"


def call_settings(run: TaskRun, tools: list[dict]) -> dict:
    """The agent's model settings, and its output schema as a response format where the route takes one and
    the call can only answer (no tools offered: an agent without tools, or a repair step)."""
    agent = run.agent
    settings = agent.settings.chosen() if agent.settings else {}
    if agent.output_schema is not None and run.output_format_native and not tools:
        settings["response_format"] = response_format(agent.output_schema)
    return settings


def cause_of(err: BaseException) -> str:
    """The root of a failure, as a step's error names it (an activity's error wraps its cause)."""
    while err.__cause__ is not None:
        err = err.__cause__
    return str(err) or type(err).__name__
