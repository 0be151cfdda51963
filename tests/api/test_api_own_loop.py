"""A task whose loop is the author's own: an OpenAI Agents SDK agent run through the task's Chat Completions
route on the real worker and the simulated engine; its calls booked once, replayed when the loop re-runs, its
tool results kept, and every refusal naming its field."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from agents import Agent as SdkAgent
from agents import function_tool
from api_helpers import Stack, unique

from orchestrator.api.task_ids import scoped_task_id
from sdk import AgentSpec, Budget, TaskStatus
from sdk.openai_agents import run_on_berth

MODEL = "llama-3.2-1b"
SUBJECTS = "H100 bandwidth; A100 bandwidth"


def http(stack: Stack) -> httpx.AsyncClient:
    return stack.client._http


async def test_an_agents_sdk_agent_runs_as_a_task_with_its_calls_booked(stack: Stack) -> None:
    looked_up: list[str] = []

    @function_tool
    def lookup(subject: str) -> str:
        """Look a subject up."""
        looked_up.append(subject)
        return f"notes on {subject}"

    agent = SdkAgent(name="Researcher", instructions="Research each subject, then report.", tools=[lookup])
    run = await run_on_berth(
        stack.client, agent, SUBJECTS, model=MODEL, budget=Budget(tokens=20_000), task_id=unique("own")
    )

    assert "Report on" in run.final_output
    assert looked_up == ["H100 bandwidth", "A100 bandwidth"]
    state = await run.task.status()
    assert state.status == TaskStatus.completed and state.result == run.final_output
    ledger = await run.task.ledger()
    assert ledger.totals.calls == state.step == 3  # two tool rounds and the answer, each one step
    assert state.spend.tokens_used == (
        ledger.totals.prompt_tokens + ledger.totals.completion_tokens + ledger.totals.lost_tokens
    )


async def test_a_loop_run_again_after_a_crash_replays_its_calls_and_keeps_its_tool_results(stack: Stack) -> None:
    runs: list[str] = []
    crash = asyncio.Event()

    @function_tool
    async def lookup(subject: str) -> str:
        """Look a subject up."""
        runs.append(subject)
        if subject.startswith("A100") and not crash.is_set():
            crash.set()
            await asyncio.Event().wait()  # the process dies here, mid-tool
        return f"notes on {subject}"

    agent = SdkAgent(name="Researcher", instructions="Research each subject, then report.", tools=[lookup])
    task_id = unique("own")
    first = asyncio.create_task(
        run_on_berth(stack.client, agent, SUBJECTS, model=MODEL, budget=Budget(tokens=20_000), task_id=task_id)
    )
    await asyncio.wait_for(crash.wait(), timeout=120)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    task = stack.client.task(scoped_task_id("default", task_id))
    before = await task.ledger()
    assert before.totals.calls == 2 and (await task.status()).status == TaskStatus.running

    run = await run_on_berth(stack.client, agent, SUBJECTS, model=MODEL, budget=Budget(tokens=20_000), task_id=task_id)

    # The first tool's result was kept: it ran once; the second ran again (it never reported), then the answer.
    assert runs == ["H100 bandwidth", "A100 bandwidth", "A100 bandwidth"]
    assert "Report on" in run.final_output
    after = await run.task.ledger()
    assert after.totals.calls == 3  # the two calls made before the crash were replayed, not generated again
    replayed = [r.usage.input_tokens for r in run.result.raw_responses[:2]]
    assert replayed == [0, 0]  # and the loop was told they cost nothing this time
    state = await run.task.status()
    assert state.status == TaskStatus.completed and state.step == 3


async def test_a_task_on_berths_loop_takes_no_calls_from_outside(stack: Stack) -> None:
    spec = await stack.client.register(AgentSpec(name=unique("inner"), model=MODEL, instructions="Answer."))
    task = await stack.client.submit(spec.name, "length: 4000 tokens", budget=20_000)
    response = await http(stack).post(
        f"/v1/tasks/{task.task_id}/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]}
    )
    assert response.status_code == 409, response.text
    assert response.json()["error"]["field"] == "task_id" and "loop='own'" in response.json()["error"]["message"]
    await task.cancel()


LOOKUP = {
    "type": "function",
    "function": {
        "name": "lookup",
        "description": "Look a subject up.",
        "parameters": {"type": "object", "properties": {"subject": {"type": "string"}}, "required": ["subject"]},
    },
}


async def own_task(stack: Stack, budget: int = 20_000, text: str = SUBJECTS) -> str:
    spec = await stack.client.register(AgentSpec(name=unique("own"), model=MODEL, loop="own"))
    return (await stack.client.submit(spec.name, text, budget=budget)).task_id


@pytest.mark.parametrize(
    "body, field",
    [
        ({"messages": [{"role": "user", "content": SUBJECTS}], "temprature": 0.2}, "temprature"),
        ({"messages": [{"role": "user", "content": SUBJECTS}], "model": "gpt-4o"}, "model"),
        ({"messages": [{"role": "user", "content": SUBJECTS}], "max_tokens": 0}, "max_tokens"),
        ({"messages": [{"role": "user", "content": SUBJECTS}], "n": 2}, "n"),
        ({"messages": [{"role": "user", "content": SUBJECTS}], "temperature": 7}, "temperature"),
        ({"messages": [{"role": "system", "content": "Be brief."}]}, "messages"),
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "user", "content": SUBJECTS}], "tool_choice": "required"}, "tool_choice"),
        ({"messages": [{"role": "user", "content": SUBJECTS}], "tool_choice": "always"}, "tool_choice"),
        (
            {
                "messages": [{"role": "user", "content": SUBJECTS}],
                "tools": [LOOKUP],
                "tool_choice": {"type": "function", "function": {"name": "weather"}},
            },
            "tool_choice",
        ),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "text", "text": SUBJECTS},
                            {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
                        ],
                    }
                ]
            },
            "messages.0.content",
        ),
    ],
)
async def test_a_bad_call_is_refused_naming_its_field(stack: Stack, body: dict, field: str) -> None:
    task_id = await own_task(stack)
    response = await http(stack).post(f"/v1/tasks/{task_id}/chat/completions", json=body)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["field"] == field
    assert (await stack.client.task(task_id).ledger()).totals.calls == 0


async def test_a_call_that_rewrites_the_conversation_is_refused(stack: Stack) -> None:
    task_id = await own_task(stack)
    response = await http(stack).post(
        f"/v1/tasks/{task_id}/chat/completions", json={"messages": [{"role": "user", "content": "another question"}]}
    )
    assert response.status_code == 409, response.text
    assert response.json()["error"]["field"] == "messages"


async def test_a_call_short_of_budget_is_402_and_the_task_waits_for_more(stack: Stack) -> None:
    task_id = await own_task(stack, budget=10)
    response = await http(stack).post(
        f"/v1/tasks/{task_id}/chat/completions", json={"messages": [{"role": "user", "content": SUBJECTS}]}
    )
    assert response.status_code == 402, response.text
    assert response.json()["error"]["field"] == "budget"
    assert (await stack.client.task(task_id).status()).status == TaskStatus.awaiting_budget

    await stack.client.task(task_id).raise_budget(20_000)
    response = await http(stack).post(
        f"/v1/tasks/{task_id}/chat/completions", json={"messages": [{"role": "user", "content": SUBJECTS}]}
    )
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"]
    assert (await stack.client.task(task_id).status()).status == TaskStatus.running


async def test_tool_results_are_kept_only_for_calls_the_tasks_model_made(stack: Stack) -> None:
    task_id = await own_task(stack)
    messages = [{"role": "user", "content": SUBJECTS}]
    tools = [
        {
            "type": "function",
            "function": {
                "name": "lookup",
                "parameters": {
                    "type": "object",
                    "properties": {"subject": {"type": "string"}},
                    "required": ["subject"],
                },
            },
        }
    ]
    response = await http(stack).post(
        f"/v1/tasks/{task_id}/chat/completions", json={"messages": messages, "tools": tools}
    )
    call_id = response.json()["choices"][0]["message"]["tool_calls"][0]["id"]

    forged = await http(stack).put(f"/v1/tasks/{task_id}/tool-results/not-a-call", json={"content": "x"})
    assert forged.status_code == 404 and forged.json()["error"]["field"] == "call_id"
    task = stack.client.task(task_id)
    assert await task.kept_tool_result(call_id) is None
    await task.keep_tool_result(call_id, "notes")
    await task.keep_tool_result(call_id, "other notes")  # the first report stands
    assert await task.kept_tool_result(call_id) == "notes"

    state = await task.finish(output="done")
    assert state.status == TaskStatus.completed and state.result == "done"


async def test_an_own_loop_agent_keeps_its_tools_and_prompts_in_its_loop() -> None:
    with pytest.raises(ValueError, match="instructions: an agent whose loop is its own"):
        AgentSpec(name="x", model=MODEL, loop="own", instructions="Be brief.")


async def test_a_streaming_client_gets_the_reply_as_chunks_and_a_replayed_call_costs_nothing(stack: Stack) -> None:
    from openai import AsyncOpenAI

    task_id = await own_task(stack, text="length: 60 tokens")
    task = stack.client.task(task_id)
    openai = AsyncOpenAI(
        base_url=task.openai_base_url,
        api_key=stack.client._api_key or "",
        http_client=httpx.AsyncClient(transport=httpx.ASGITransport(stack.app)),
    )
    messages = [{"role": "system", "content": "Write."}, {"role": "user", "content": "length: 60 tokens"}]
    chunks = [
        c
        async for c in await openai.chat.completions.create(
            model=MODEL, messages=messages, stream=True, stream_options={"include_usage": True}
        )
    ]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text and chunks[-1].usage.completion_tokens > 0

    again = await openai.chat.completions.create(model=MODEL, messages=messages)
    assert again.choices[0].message.content == text and again.usage.total_tokens == 0
    assert (await task.ledger()).totals.calls == 1

    checkpoints = await task.checkpoints()
    response = await http(stack).post(f"/v1/tasks/{task_id}/fork", json={"checkpoint_seq": checkpoints[-1].seq})
    assert response.status_code == 409 and response.json()["error"]["field"] == "task_id"
    await task.finish(output=text)


def openai_client(stack: Stack, task_id: str):
    from openai import AsyncOpenAI

    return AsyncOpenAI(
        base_url=stack.client.task(task_id).openai_base_url,
        api_key=stack.client._api_key or "",
        http_client=httpx.AsyncClient(transport=httpx.ASGITransport(stack.app)),
    )


async def test_every_tool_choice_form_is_served(stack: Stack) -> None:
    """none answers without a call; required and a named function make the model call (the named one);
    parallel_tool_calls false leaves one call where the model would make two."""
    task_id = await own_task(stack, budget=50_000)
    openai = openai_client(stack, task_id)
    user = [{"role": "user", "content": SUBJECTS}]
    weather = {**LOOKUP, "function": {**LOOKUP["function"], "name": "weather"}}

    none = await openai.chat.completions.create(model=MODEL, messages=user, tools=[LOOKUP], tool_choice="none")
    assert none.choices[0].message.tool_calls is None and none.choices[0].message.content
    assert none.choices[0].finish_reason == "stop"

    task_id = await own_task(stack, budget=50_000)
    openai = openai_client(stack, task_id)
    named = await openai.chat.completions.create(
        model=MODEL,
        messages=user,
        tools=[LOOKUP, weather],
        tool_choice={"type": "function", "function": {"name": "weather"}},
    )
    [call] = named.choices[0].message.tool_calls
    assert call.function.name == "weather" and "subject" in call.function.arguments
    assert named.choices[0].finish_reason == "tool_calls"

    task_id = await own_task(stack, budget=50_000, text="length: 20 tokens")
    openai = openai_client(stack, task_id)
    required = await openai.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "length: 20 tokens"}], tools=[LOOKUP], tool_choice="required"
    )
    assert [c.function.name for c in required.choices[0].message.tool_calls] == ["lookup"]

    task_id = await own_task(stack, budget=50_000, text=f"{SUBJECTS}\nin parallel")
    openai = openai_client(stack, task_id)
    parallel = [{"role": "user", "content": f"{SUBJECTS}\nin parallel"}]
    one = await openai.chat.completions.create(
        model=MODEL, messages=parallel, tools=[LOOKUP], parallel_tool_calls=False
    )
    assert len(one.choices[0].message.tool_calls) == 1


async def test_the_models_route_lists_the_tasks_one_model(stack: Stack) -> None:
    task_id = await own_task(stack)
    openai = openai_client(stack, task_id)
    assert [m.id for m in (await openai.models.list()).data] == [MODEL]
    assert (await openai.models.retrieve(MODEL)).id == MODEL
    missing = await http(stack).get(f"/v1/tasks/{task_id}/models/gpt-4o")
    assert missing.status_code == 404 and missing.json()["error"]["field"] == "model"


async def test_a_call_asked_again_with_other_settings_is_refused_naming_the_setting(stack: Stack) -> None:
    task_id = await own_task(stack)
    url = f"/v1/tasks/{task_id}/chat/completions"
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": SUBJECTS}]
    first = await http(stack).post(url, json={"messages": messages, "temperature": 0.2})
    assert first.status_code == 200, first.text

    warmer = await http(stack).post(url, json={"messages": messages, "temperature": 0.9})
    assert warmer.status_code == 409 and warmer.json()["error"]["field"] == "temperature", warmer.text
    other_system = [{"role": "system", "content": "Be thorough."}, messages[1]]
    rewritten = await http(stack).post(url, json={"messages": other_system, "temperature": 0.2})
    assert rewritten.status_code == 409 and rewritten.json()["error"]["field"] == "messages (system)"
    same = await http(stack).post(url, json={"messages": messages, "temperature": 0.2})
    assert same.json()["berth"]["replayed"] is True
    assert (await stack.client.task(task_id).ledger()).totals.calls == 1


async def test_a_replay_never_answers_past_the_limit_of_the_call_that_asks(stack: Stack) -> None:
    task_id = await own_task(stack, text="length: 200 tokens")
    url = f"/v1/tasks/{task_id}/chat/completions"
    messages = [{"role": "user", "content": "length: 200 tokens"}]
    first = await http(stack).post(url, json={"messages": messages})
    written = first.json()["usage"]["completion_tokens"]
    assert written > 20
    cut = await http(stack).post(url, json={"messages": messages, "max_completion_tokens": 20})
    assert cut.status_code == 409 and cut.json()["error"]["field"] == "max_completion_tokens"
    assert str(written) in cut.json()["error"]["message"]
    enough = await http(stack).post(url, json={"messages": messages, "max_completion_tokens": written})
    assert enough.status_code == 200 and enough.json()["berth"]["replayed"] is True


async def test_a_first_call_that_does_not_start_with_the_input_is_told_the_rule(stack: Stack) -> None:
    task_id = await own_task(stack)
    response = await http(stack).post(
        f"/v1/tasks/{task_id}/chat/completions", json={"messages": [{"role": "user", "content": "hello"}]}
    )
    assert response.status_code == 409 and response.json()["error"]["field"] == "messages"
    assert "first call sends that message first" in response.json()["error"]["message"]


async def test_a_streamed_calls_pieces_are_its_text_and_a_refusal_answers_with_its_status(stack: Stack) -> None:
    """The engine here writes at once; tests/system/test_own_loop_stream.py shows the pieces arrive as written."""
    import openai as openai_errors

    task_id = await own_task(stack, text="length: 600 tokens")
    openai = openai_client(stack, task_id)
    messages = [{"role": "user", "content": "length: 600 tokens"}]
    chunks = [c async for c in await openai.chat.completions.create(model=MODEL, messages=messages, stream=True)]
    pieces = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    again = await openai.chat.completions.create(model=MODEL, messages=messages)
    assert "".join(pieces) == again.choices[0].message.content and again.usage.total_tokens == 0

    short = await own_task(stack, budget=10)
    with pytest.raises(openai_errors.APIStatusError) as refused:
        await openai_client(stack, short).chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": SUBJECTS}], stream=True
        )
    assert refused.value.status_code == 402


async def test_a_task_token_drives_its_own_loop_and_no_other(stack: Stack) -> None:
    """A loop's process may hold its task's token: it spends no more than its task's budget. It cannot call
    another task's model nor decide on its own tool calls."""
    task_id, other = await own_task(stack), await own_task(stack)
    token = await stack.client.task(task_id).token()
    headers = {"authorization": f"Bearer {token}"}
    body = {"messages": [{"role": "user", "content": SUBJECTS}], "tools": [LOOKUP]}
    own = await http(stack).post(f"/v1/tasks/{task_id}/chat/completions", json=body, headers=headers)
    assert own.status_code == 200, own.text
    call_id = own.json()["choices"][0]["message"]["tool_calls"][0]["id"]
    kept = await http(stack).put(f"/v1/tasks/{task_id}/tool-results/{call_id}", json={"content": "n"}, headers=headers)
    assert kept.status_code == 204, kept.text
    theirs = await http(stack).post(f"/v1/tasks/{other}/chat/completions", json=body, headers=headers)
    assert theirs.status_code == 403 and theirs.json()["error"]["field"] == "authorization"
    decided = await http(stack).post(f"/v1/tasks/{task_id}/approve", json={}, headers=headers)
    assert decided.status_code == 403
    finished = await http(stack).post(f"/v1/tasks/{task_id}/finish", json={"output": "done"}, headers=headers)
    assert finished.status_code == 200 and finished.json()["status"] == "completed"
    await stack.client.task(other).cancel()


async def test_a_streamed_call_after_an_answered_one_streams_its_own_text(stack: Stack) -> None:
    """The stored step count lags the workflow's until the next step writes its predecessor: a stream must
    follow the call's own step, not the text of the one before it."""
    task_id = await own_task(stack, text="length: 80 tokens")
    openai = openai_client(stack, task_id)
    messages: list = [{"role": "user", "content": "length: 80 tokens"}]
    first = await openai.chat.completions.create(model=MODEL, messages=messages)
    messages += [
        {"role": "assistant", "content": first.choices[0].message.content},
        {"role": "user", "content": "Once more, briefly."},
    ]
    stream = await openai.chat.completions.create(model=MODEL, messages=messages, stream=True, max_tokens=40)
    text = "".join(c.choices[0].delta.content or "" for c in [c async for c in stream] if c.choices)
    again = await openai.chat.completions.create(model=MODEL, messages=messages, max_tokens=40)
    assert text == again.choices[0].message.content != first.choices[0].message.content
    assert (await stack.client.task(task_id).ledger()).totals.calls == 2


async def test_a_call_asking_for_a_few_tokens_gets_them_rather_than_a_budget_refusal(stack: Stack) -> None:
    """An answer limit under Berth's least worthwhile answer (16 tokens) is the caller's to ask: with budget to
    spare it is served, where it was once refused as short of budget and left the task awaiting_budget."""
    task_id = await own_task(stack)
    openai = openai_client(stack, task_id)
    reply = await openai.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": SUBJECTS}], max_completion_tokens=5
    )
    assert reply.choices[0].finish_reason == "length" and reply.usage.completion_tokens == 5
    assert (await stack.client.task(task_id).status()).status == TaskStatus.running


async def test_a_forced_tool_call_to_a_model_whose_engine_cannot_force_one_is_refused_at_once(stack: Stack) -> None:
    spec = await stack.client.register(AgentSpec(name=unique("own"), model="smollm2-135m", loop="own"))
    task = await stack.client.submit(spec.name, SUBJECTS, budget=20_000)
    body = {"messages": [{"role": "user", "content": SUBJECTS}], "tools": [LOOKUP], "tool_choice": "required"}
    response = await http(stack).post(f"/v1/tasks/{task.task_id}/chat/completions", json=body)
    assert response.status_code == 422 and response.json()["error"]["field"] == "tool_choice"
    assert "llama.cpp" in response.json()["error"]["message"]
    assert not (await task.status()).status.is_final and (await task.ledger()).totals.calls == 0
    await task.cancel()
