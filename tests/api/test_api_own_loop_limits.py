"""Permitted input never breaks an own loop's task (issue 34, item 7): a call whose prompt cannot fit its model's
context window, or whose new messages are more than a Temporal payload carries, is refused up front naming
`messages`, and the task takes the loop's next, shorter call. Before, the first failed the task (its engine
refused the prompt: a failed model call), and the second answered 503 after 20 s and failed the task."""

from __future__ import annotations

import httpx
from api_helpers import Stack, unique

from orchestrator.api.loop_limits import MAX_LOOP_CALL_BYTES
from sdk import AgentSpec, TaskStatus

SUBJECTS = "H100 bandwidth; A100 bandwidth"
# ~189 KiB that the tokenizers count as ~3,000 tokens: many such messages fit a 131k context window, and pass
# Temporal's payload limit long before they fill it (the finding's 3.53 MiB conversation was 196k tokens).
SPARSE = ("-" * 127 + "\n") * 1480


def http(stack: Stack) -> httpx.AsyncClient:
    return stack.client._http


async def own_task(stack: Stack, model: str) -> str:
    spec = await stack.client.register(AgentSpec(name=unique("own"), model=model, loop="own"))
    return (await stack.client.submit(spec.name, SUBJECTS, budget=200_000)).task_id


async def first_reply(stack: Stack, task_id: str) -> list[dict]:
    """The conversation after the loop's first call: its input and the reply it got."""
    messages = [{"role": "user", "content": SUBJECTS}]
    first = await http(stack).post(f"/v1/tasks/{task_id}/chat/completions", json={"messages": messages})
    assert first.status_code == 200, first.text
    return [*messages, {"role": "assistant", "content": first.json()["choices"][0]["message"]["content"]}]


async def test_a_prompt_past_the_context_window_is_refused_and_the_task_takes_the_next_call(stack: Stack) -> None:
    task_id = await own_task(stack, "qwen2.5-7b")  # a 32,768-token context window in the catalogue and the engine
    conversation = await first_reply(stack, task_id)
    url = f"/v1/tasks/{task_id}/chat/completions"

    too_long = await http(stack).post(
        url, json={"messages": [*conversation, {"role": "user", "content": "word " * 39_000}]}
    )

    assert too_long.status_code == 422, too_long.text
    error = too_long.json()["error"]
    assert error["field"] == "messages" and "32,768" in error["message"] and "context window" in error["message"]
    task = stack.client.task(task_id)
    assert (await task.status()).status == TaskStatus.running and (await task.ledger()).totals.calls == 1
    shorter = await http(stack).post(url, json={"messages": [*conversation, {"role": "user", "content": "In brief?"}]})
    assert shorter.status_code == 200, shorter.text
    assert (await task.ledger()).totals.calls == 2
    await task.cancel()


async def test_a_call_adding_more_than_a_payload_carries_is_refused_and_the_task_takes_the_next_call(
    stack: Stack,
) -> None:
    task_id = await own_task(stack, "llama-3.2-1b")
    conversation = await first_reply(stack, task_id)
    url = f"/v1/tasks/{task_id}/chat/completions"
    pasted = [{"role": "user", "content": SPARSE} for _ in range(14)]  # 2.6 MiB, under the 4 MiB body cap

    too_much = await http(stack).post(url, json={"messages": [*conversation, *pasted]})

    assert too_much.status_code == 422, too_much.text
    error = too_much.json()["error"]
    assert error["field"] == "messages" and f"{MAX_LOOP_CALL_BYTES / 2**20:.2f} MiB" in error["message"]
    task = stack.client.task(task_id)
    assert (await task.status()).status == TaskStatus.running and (await task.ledger()).totals.calls == 1
    shorter = await http(stack).post(url, json={"messages": [*conversation, *pasted[:4]]})  # 0.74 MiB
    assert shorter.status_code == 200, shorter.text
    assert (await task.status()).status == TaskStatus.running and (await task.ledger()).totals.calls == 2
    await task.cancel()


async def test_a_prompt_that_leaves_no_room_for_the_answer_asked_is_refused_naming_what_asked(stack: Stack) -> None:
    """The engine refuses a prompt and its answer past the window (vLLM and OpenAI do too): a prompt of ~31,500
    tokens fits 32,768 with a short answer, not with the agent's 1,024-token one."""
    task_id = await own_task(stack, "qwen2.5-7b")
    conversation = [*await first_reply(stack, task_id), {"role": "user", "content": "word " * 31_500}]
    url = f"/v1/tasks/{task_id}/chat/completions"

    agents_answer = await http(stack).post(url, json={"messages": conversation})
    asked_too_much = await http(stack).post(url, json={"messages": conversation, "max_completion_tokens": 800})

    assert agents_answer.status_code == 422 and agents_answer.json()["error"]["field"] == "messages"
    assert "1,024" in agents_answer.json()["error"]["message"]
    assert asked_too_much.status_code == 422
    assert asked_too_much.json()["error"]["field"] == "max_completion_tokens"
    short = await http(stack).post(url, json={"messages": conversation, "max_completion_tokens": 200})
    assert short.status_code == 200, short.text
    task = stack.client.task(task_id)
    assert (await task.status()).status == TaskStatus.running and (await task.ledger()).totals.calls == 2
    await task.cancel()


async def test_a_conversation_grows_past_the_payload_limit_a_call_at_a_time(stack: Stack) -> None:
    """The task holds its conversation in the checkpoint store: only what a call adds travels through Temporal."""
    task_id = await own_task(stack, "llama-3.2-1b")
    conversation = await first_reply(stack, task_id)
    url = f"/v1/tasks/{task_id}/chat/completions"
    for _ in range(4):  # 4 × 0.74 MiB: 2.9 MiB in all, ~48k tokens
        conversation += [{"role": "user", "content": SPARSE} for _ in range(4)]
        answered = await http(stack).post(url, json={"messages": conversation})
        assert answered.status_code == 200, answered.text
        conversation.append({"role": "assistant", "content": answered.json()["choices"][0]["message"]["content"]})
    task = stack.client.task(task_id)
    assert (await task.status()).status == TaskStatus.running and (await task.ledger()).totals.calls == 5
    await task.cancel()
