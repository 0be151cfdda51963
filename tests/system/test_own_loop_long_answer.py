"""An own loop's call that offers tools and instructions of its own and answers at length, on `berth up`'s GPU
node: the control plane reserves for the prompt the call sends (its tools and instructions included), so the
answer uses every token the step grants and books once, where it was once refused at its settle and retried
until the task failed."""

from __future__ import annotations

import pytest
from openai import OpenAI

from sdk import AgentSpec, Budget, SyncClient
from tests.system.books import assert_calls_booked_once
from tests.system.conftest import Stack

pytestmark = pytest.mark.system

MODEL = "llama-3.2-1b"
QUESTION = "length: 3000 tokens"
INSTRUCTIONS = "You are a thorough technical writer. " * 20
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"Look a subject up in the team's {name.replace('_', ' ')}, with every detail kept.",
            "parameters": {
                "type": "object",
                "properties": {"subject": {"type": "string"}, "depth": {"type": "integer"}},
                "required": ["subject"],
            },
        },
    }
    for name in ("design_notes", "incident_reports", "benchmarks")
]


def test_a_call_with_its_own_tools_and_a_long_answer_completes_booked_once(stack: Stack) -> None:
    with SyncClient(stack.api, stack.admin_key()) as berth:
        berth.register(AgentSpec(name="long-answers", model=MODEL, loop="own"))
        task = berth.submit("long-answers", QUESTION, budget=Budget(tokens=20_000), task_id="own-long-answer")
    openai = OpenAI(base_url=f"{stack.api}/v1/tasks/{task.task_id}", api_key=stack.admin_key(), max_retries=0)
    reply = openai.chat.completions.create(
        model=MODEL,
        messages=[{"role": "system", "content": INSTRUCTIONS}, {"role": "user", "content": QUESTION}],
        tools=TOOLS,
        tool_choice="none",
    )
    assert reply.choices[0].message.content and reply.usage is not None
    # The answer ran to the step's limit: the agent's max_tokens_per_step, all of it granted.
    assert reply.choices[0].finish_reason == "length" and reply.usage.completion_tokens == 1024
    totals = assert_calls_booked_once(stack, task.task_id, calls=1)
    assert totals["prompt_tokens"] == reply.usage.prompt_tokens > 200  # the tools and instructions were counted
    stack.http.post(f"/v1/tasks/{task.task_id}/finish", json={"output": "done"}).raise_for_status()
