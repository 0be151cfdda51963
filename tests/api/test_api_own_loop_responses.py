"""The Responses API on a task whose loop is its own, driven by the real `openai` client and by the Agents SDK's
default model (OpenAIResponsesModel): text, function calls and their outputs, streaming events, replays, and
what only OpenAI's servers can do refused by name."""

from __future__ import annotations

import httpx
import pytest
from agents import Agent as SdkAgent
from agents import OpenAIResponsesModel, RunConfig, Runner, function_tool
from api_helpers import Stack, unique
from openai import AsyncOpenAI

from sdk import AgentSpec, TaskStatus

MODEL = "llama-3.2-1b"
SUBJECTS = "H100 bandwidth; A100 bandwidth"
LOOKUP = {
    "type": "function",
    "name": "lookup",
    "description": "Look a subject up.",
    "parameters": {"type": "object", "properties": {"subject": {"type": "string"}}, "required": ["subject"]},
}


async def own_task(stack: Stack, text: str = SUBJECTS) -> str:
    spec = await stack.client.register(AgentSpec(name=unique("own"), model=MODEL, loop="own"))
    return (await stack.client.submit(spec.name, text, budget=50_000)).task_id


def client(stack: Stack, task_id: str) -> AsyncOpenAI:
    return AsyncOpenAI(
        base_url=stack.client.task(task_id).openai_base_url,
        api_key=stack.client._api_key or "",
        http_client=httpx.AsyncClient(transport=httpx.ASGITransport(stack.app)),
    )


async def test_a_text_reply_and_its_replay(stack: Stack) -> None:
    task_id = await own_task(stack, "length: 40 tokens")
    openai = client(stack, task_id)
    first = await openai.responses.create(model=MODEL, instructions="Write.", input="length: 40 tokens")
    assert first.status == "completed" and first.output_text and first.usage.output_tokens > 0
    again = await openai.responses.create(model=MODEL, instructions="Write.", input="length: 40 tokens")
    assert again.output_text == first.output_text and again.usage.total_tokens == 0
    assert (await stack.client.task(task_id).ledger()).totals.calls == 1


async def test_function_calls_and_their_outputs_make_one_conversation(stack: Stack) -> None:
    task_id = await own_task(stack)
    openai = client(stack, task_id)
    conversation: list = [{"role": "user", "content": SUBJECTS}]
    calls = 0
    while True:
        reply = await openai.responses.create(model=MODEL, input=conversation, tools=[LOOKUP])
        conversation += [item.model_dump(exclude_none=True) for item in reply.output]
        made = [item for item in reply.output if item.type == "function_call"]
        if not made:
            break
        calls += len(made)
        conversation += [
            {"type": "function_call_output", "call_id": c.call_id, "output": f"notes on {c.arguments}"} for c in made
        ]
    assert calls == 2 and "Report on" in reply.output_text
    assert (await stack.client.task(task_id).ledger()).totals.calls == 3


async def test_a_streamed_reply_is_its_events_and_the_deltas_are_its_text(stack: Stack) -> None:
    task_id = await own_task(stack, "length: 60 tokens")
    openai = client(stack, task_id)
    events = [e async for e in await openai.responses.create(model=MODEL, input="length: 60 tokens", stream=True)]
    kinds = [e.type for e in events]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas and deltas == events[-1].response.output_text


async def test_the_agents_sdk_default_model_runs_an_agent_with_tools_on_a_task(stack: Stack) -> None:
    looked_up: list[str] = []

    @function_tool
    def lookup(subject: str) -> str:
        """Look a subject up."""
        looked_up.append(subject)
        return f"notes on {subject}"

    task_id = await own_task(stack)
    model = OpenAIResponsesModel(model=MODEL, openai_client=client(stack, task_id))
    agent = SdkAgent(name="Researcher", instructions="Research each subject, then report.", tools=[lookup])
    result = await Runner.run(agent, SUBJECTS, run_config=RunConfig(model=model, tracing_disabled=True))
    assert "Report on" in result.final_output and looked_up == ["H100 bandwidth", "A100 bandwidth"]
    task = stack.client.task(task_id)
    assert (await task.ledger()).totals.calls == 3
    state = await task.finish(output=result.final_output)
    assert state.status == TaskStatus.completed


@pytest.mark.parametrize(
    "body, field",
    [
        ({"input": SUBJECTS, "previous_response_id": "resp_1"}, "previous_response_id"),
        ({"input": SUBJECTS, "background": True}, "background"),
        ({"input": SUBJECTS, "tools": [{"type": "web_search"}]}, "tools.0.type"),
        ({"input": SUBJECTS, "tool_choice": "required"}, "tool_choice"),
        ({"input": SUBJECTS, "max_output_tokens": 0}, "max_output_tokens"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
            "input.0.content",
        ),
        ({"input": [{"type": "reasoning", "summary": []}]}, "input.0.type"),
        ({"input": SUBJECTS, "include": ["message.output_text.logprobs"]}, "include"),
    ],
)
async def test_what_a_task_cannot_do_is_refused_naming_the_field(stack: Stack, body: dict, field: str) -> None:
    task_id = await own_task(stack)
    response = await stack.client._http.post(f"/v1/tasks/{task_id}/responses", json=body)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["field"] == field
    assert (await stack.client.task(task_id).ledger()).totals.calls == 0


async def test_a_streamed_responses_deltas_are_its_text_under_one_item(stack: Stack) -> None:
    task_id = await own_task(stack, "length: 600 tokens")
    openai = client(stack, task_id)
    events = [e async for e in await openai.responses.create(model=MODEL, input="length: 600 tokens", stream=True)]
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert deltas and "".join(deltas) == events[-1].response.output_text
    item_ids = {e.item_id for e in events if e.type == "response.output_text.delta"}
    assert item_ids == {events[-1].response.output[0].id}
