"""The `openai` client of the lock, as a hand-written loop uses it, against tasks of an own-loop agent on `berth up`:
a plain call, a tool round, structured output parsed into a pydantic object, and a stream. Each call must come back
as the client expects it and be booked in the task's ledger once."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from openai import OpenAI
from pydantic import BaseModel

from sdk import AgentSpec, Budget, SyncClient
from tests.system.books import assert_calls_booked_once
from tests.system.conftest import Stack
from tests.system.rerun import kill_mid_tool_and_run_again

pytestmark = pytest.mark.system

MODEL = "llama-3.2-1b"
AGENT = "openai-client-tests"
LONG_AGENT = "openai-client-tests-long"  # room for an answer long enough to stream over several heartbeats
QUESTION = "H100 bandwidth"
SUBJECTS = "H100 bandwidth; A100 bandwidth"
LOOKUP = {
    "type": "function",
    "function": {
        "name": "lookup",
        "description": "Look a subject up in the team's notes.",
        "parameters": {"type": "object", "properties": {"subject": {"type": "string"}}, "required": ["subject"]},
    },
}


class Specs(BaseModel):
    subject: str
    bandwidth_tb_s: float


@pytest.fixture(scope="module")
def berth(stack: Stack) -> Iterator[SyncClient]:
    with SyncClient(stack.api, stack.admin_key()) as client:
        client.register(AgentSpec(name=AGENT, model=MODEL, loop="own"))
        client.register(AgentSpec(name=LONG_AGENT, model=MODEL, loop="own", max_tokens_per_step=8192))
        yield client


def task_client(
    stack: Stack, berth: SyncClient, name: str, question: str = QUESTION, agent: str = AGENT
) -> tuple[str, OpenAI]:
    """A fresh task whose input is the loop's first question, and an OpenAI client of its model."""
    task = berth.submit(agent, question, budget=Budget(tokens=20_000), task_id=name)
    return task.task_id, OpenAI(base_url=f"{stack.api}/v1/tasks/{task.task_id}", api_key=stack.admin_key())


def finish(stack: Stack, task_id: str, output: str) -> None:
    stack.http.post(f"/v1/tasks/{task_id}/finish", json={"output": output}).raise_for_status()


def test_a_plain_call(stack: Stack, berth: SyncClient) -> None:
    task_id, openai = task_client(stack, berth, "oa-plain")
    reply = openai.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": QUESTION}])
    text = reply.choices[0].message.content or ""
    assert text.startswith(f"Report on {QUESTION}.") and reply.choices[0].finish_reason == "stop"
    totals = assert_calls_booked_once(stack, task_id, calls=1)
    assert reply.usage is not None and reply.usage.prompt_tokens == totals["prompt_tokens"]
    finish(stack, task_id, text)


def test_a_tool_round_then_the_answer(stack: Stack, berth: SyncClient) -> None:
    task_id, openai = task_client(stack, berth, "oa-tools")
    messages: list = [{"role": "user", "content": QUESTION}]
    first = openai.chat.completions.create(model=MODEL, messages=messages, tools=[LOOKUP])
    [call] = first.choices[0].message.tool_calls or []
    assert call.function.name == "lookup" and json.loads(call.function.arguments) == {"subject": QUESTION}
    messages += [
        first.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": f"notes on {QUESTION}"},
    ]
    answer = openai.chat.completions.create(model=MODEL, messages=messages, tools=[LOOKUP])
    assert f"Findings on {QUESTION}: notes on {QUESTION}" in (answer.choices[0].message.content or "")
    assert_calls_booked_once(stack, task_id, calls=2)
    finish(stack, task_id, answer.choices[0].message.content or "")


def test_structured_output_parsed_into_a_pydantic_object(stack: Stack, berth: SyncClient) -> None:
    task_id, openai = task_client(stack, berth, "oa-structured")
    parsed = openai.chat.completions.parse(
        model=MODEL, messages=[{"role": "user", "content": QUESTION}], response_format=Specs
    )
    assert parsed.choices[0].message.parsed == Specs(subject=f"Report on {QUESTION}.", bandwidth_tb_s=0.0)
    assert_calls_booked_once(stack, task_id, calls=1)
    finish(stack, task_id, parsed.choices[0].message.content or "")


def test_a_stream_is_the_answer_and_is_booked_once(stack: Stack, berth: SyncClient) -> None:
    question = f"{QUESTION}\nlength: 600 tokens"
    task_id, openai = task_client(stack, berth, "oa-stream", question)
    messages = [{"role": "user", "content": question}]
    chunks = list(
        openai.chat.completions.create(
            model=MODEL, messages=messages, stream=True, stream_options={"include_usage": True}
        )
    )
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    usage = chunks[-1].usage
    assert usage is not None and usage.completion_tokens > 0
    # The same call again is the task's call replayed: the same text, generated and charged once.
    again = openai.chat.completions.create(model=MODEL, messages=messages)
    assert streamed == again.choices[0].message.content and "Point 1:" in streamed
    assert again.usage is not None and again.usage.total_tokens == 0
    totals = assert_calls_booked_once(stack, task_id, calls=1)
    assert usage.completion_tokens == totals["completion_tokens"]
    finish(stack, task_id, streamed)


def test_a_stream_arrives_in_deltas_as_it_is_written(stack: Stack, berth: SyncClient) -> None:
    question = f"{QUESTION}\nlength: 6000 tokens"
    task_id, openai = task_client(stack, berth, "oa-stream-deltas", question, agent=LONG_AGENT)
    messages = [{"role": "user", "content": question}]
    chunks = list(openai.chat.completions.create(model=MODEL, messages=messages, stream=True))
    deltas = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    again = openai.chat.completions.create(model=MODEL, messages=messages)
    assert "".join(deltas) == again.choices[0].message.content
    assert len(deltas) > 1, deltas
    assert_calls_booked_once(stack, task_id, calls=1)
    finish(stack, task_id, "".join(deltas))


def test_a_hand_written_loop_killed_mid_tool_resumes_with_nothing_done_twice(stack: Stack, tmp_path: Path) -> None:
    journal = tmp_path / "journal.txt"
    journal.touch()
    loop = [sys.executable, "-m", "tests.system.openai_loop", "--task-id", "oa-killed", "--journal", str(journal)]
    task_id = "default:oa-killed"
    out = kill_mid_tool_and_run_again(
        stack, [*loop, "--tool-seconds", "20", SUBJECTS], [*loop, SUBJECTS], journal, task_id
    )
    state = stack.http.get(f"/v1/tasks/{task_id}").json()
    assert state["status"] == "completed" and state["step"] == 3
    assert out.splitlines()[0] == f"{task_id} completed steps=3 tokens={state['spend']['tokens_used']}"
    assert "Findings on A100 bandwidth: notes on A100 bandwidth" in state["result"]
    assert_calls_booked_once(stack, task_id, calls=3)  # the re-run's replays generated and cost nothing
