"""The OpenAI Agents SDK of the lock on tasks of `berth up`, for what its own tests (test_own_loop, the API's) leave
out: a forced tool choice, an output type, and a streamed run. Each call booked once."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from agents import Agent, ModelSettings, RunConfig, Runner, function_tool, set_tracing_disabled
from openai.types.responses import ResponseTextDeltaEvent
from pydantic import BaseModel

from sdk import AgentSpec, Budget, Client
from sdk.openai_agents import BerthModelProvider, run_on_berth
from tests.system.books import assert_calls_booked_once
from tests.system.conftest import Stack

pytestmark = pytest.mark.system

MODEL = "llama-3.2-1b"
QUESTION = "H100 bandwidth"


class Specs(BaseModel):
    subject: str
    bandwidth_tb_s: float


@function_tool
def lookup(subject: str) -> str:
    """Look a subject up in the team's notes."""
    return f"notes on {subject}"


@function_tool
def convert(subject: str) -> str:
    """Convert a figure to SI units."""
    return f"{subject} in SI units"


@pytest.fixture(autouse=True, scope="module")
def no_export_to_openai() -> Iterator[None]:
    """These runs' traces would go to OpenAI's trace viewer, which the stack's machine does not reach."""
    set_tracing_disabled(True)
    yield
    set_tracing_disabled(False)


def client(stack: Stack) -> Client:
    return Client(stack.api, stack.admin_key())


async def test_a_named_tool_choice_is_the_first_call_then_the_model_chooses(stack: Stack) -> None:
    agent = Agent(
        name="Chooser",
        instructions="Use the tools, then report.",
        tools=[lookup, convert],
        model_settings=ModelSettings(tool_choice="convert"),
    )
    async with client(stack) as berth:
        run = await run_on_berth(berth, agent, QUESTION, model=MODEL, budget=Budget(tokens=20_000), task_id="ag-choice")
    # The Agents SDK resets a forced choice after the tool ran (reset_tool_choice): convert, then lookup, then the answer.
    called = [item.raw_item.name for item in run.result.new_items if item.type == "tool_call_item"]
    assert called == ["convert", "lookup"]
    assert f"notes on {QUESTION}" in run.final_output and f"{QUESTION} in SI" in run.final_output
    assert_calls_booked_once(stack, run.task.task_id, calls=3)


async def test_an_output_type_is_the_pydantic_object_and_the_tasks_result(stack: Stack) -> None:
    agent = Agent(name="Structurer", instructions="Report.", output_type=Specs)
    async with client(stack) as berth:
        run = await run_on_berth(berth, agent, QUESTION, model=MODEL, budget=Budget(tokens=20_000), task_id="ag-out")
        state = await run.task.status()
    # The simulated replica fills the schema from its prose answer: strings its first line, numbers their least value.
    assert run.final_output == Specs(subject=f"Report on {QUESTION}.", bandwidth_tb_s=0.0)
    assert state.result is not None and Specs.model_validate_json(state.result) == run.final_output
    assert_calls_booked_once(stack, run.task.task_id, calls=1)


async def test_a_streamed_run_writes_its_answer_as_text_deltas(stack: Stack) -> None:
    # 6000 tokens take ~4 s on the simulated replica here: the step's text reaches the API in ~8 heartbeats.
    question = f"{QUESTION}\nlength: 6000 tokens"
    async with client(stack) as berth:
        await berth.register(AgentSpec(name="agents-sdk-streamer", model=MODEL, loop="own", max_tokens_per_step=8192))
        task = await berth.submit("agents-sdk-streamer", question, budget=Budget(tokens=20_000), task_id="ag-stream")
        provider = BerthModelProvider(task, MODEL)
        try:
            run = Runner.run_streamed(
                Agent(name="Writer", instructions="Write."),
                question,
                run_config=RunConfig(model_provider=provider, tracing_disabled=True),
            )
            deltas = [
                event.data.delta
                async for event in run.stream_events()
                if event.type == "raw_response_event" and isinstance(event.data, ResponseTextDeltaEvent)
            ]
        finally:
            await provider.aclose()
        await task.finish(output=run.final_output)
    assert "".join(deltas) == run.final_output and "Point 1:" in run.final_output
    assert len(deltas) > 1, deltas  # written as the engine writes it, not in one piece once the step finished
    assert_calls_booked_once(stack, task.task_id, calls=1)
