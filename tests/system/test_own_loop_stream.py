"""An own loop's streamed calls on `berth up`'s GPU node, through the `openai` client: Chat Completions and the
Responses API carry the reply's text in the pieces the engine writes, before the call is answered, and the
pieces add up to the reply, which the same call sent again returns whole and free."""

from __future__ import annotations

import pytest
from openai import OpenAI

from sdk import AgentSpec, Budget, SyncClient
from tests.system.books import assert_calls_booked_once
from tests.system.conftest import Stack

pytestmark = pytest.mark.system

MODEL = "llama-3.1-8b"  # the slower writer of berth up's models: a 900-token answer takes seconds
QUESTION = "length: 900 tokens"


def task_client(stack: Stack, name: str) -> tuple[str, OpenAI]:
    with SyncClient(stack.api, stack.admin_key()) as berth:
        berth.register(AgentSpec(name="streamers", model=MODEL, loop="own"))
        task = berth.submit("streamers", QUESTION, budget=Budget(tokens=20_000), task_id=name)
    return task.task_id, OpenAI(base_url=f"{stack.api}/v1/tasks/{task.task_id}", api_key=stack.admin_key())


def test_chat_completions_stream_the_text_as_it_is_written(stack: Stack) -> None:
    task_id, openai = task_client(stack, "stream-chat")
    messages = [{"role": "user", "content": QUESTION}]
    pieces = [
        c.choices[0].delta.content
        for c in openai.chat.completions.create(model=MODEL, messages=messages, stream=True)
        if c.choices and c.choices[0].delta.content
    ]
    assert len(pieces) > 3, pieces  # piece by piece, not one delta at the end
    again = openai.chat.completions.create(model=MODEL, messages=messages)
    assert "".join(pieces) == again.choices[0].message.content
    assert again.usage is not None and again.usage.total_tokens == 0
    assert_calls_booked_once(stack, task_id, calls=1)


def test_the_responses_api_streams_the_text_as_it_is_written(stack: Stack) -> None:
    task_id, openai = task_client(stack, "stream-responses")
    events = list(openai.responses.create(model=MODEL, input=QUESTION, stream=True))
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert len(deltas) > 3
    assert events[-1].type == "response.completed" and "".join(deltas) == events[-1].response.output_text
    assert_calls_booked_once(stack, task_id, calls=1)
