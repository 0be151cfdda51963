"""The simulated engine over real HTTP: OpenAI wire format, litellm's hosted_vllm route, exact usage.

Each engine runs in this process on a free loopback port (uvicorn in a thread). Most tests
use latency_scale 0; the ones about dropped streams and overlap need real waiting.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from activities.step.tokens import count_prompt_tokens, encode  # noqa: E402
from orchestrator.engines.simulated import EngineThread  # noqa: E402

MODEL = "llama-3.1-8b"
SEARCH = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the web.",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
    },
}


@pytest.fixture(scope="module")
def engine() -> Iterator[EngineThread]:
    with EngineThread(latency_scale=0) as running:
        yield running


@pytest.fixture(scope="module")
def slow_engine() -> Iterator[EngineThread]:
    with EngineThread(latency_scale=1.0) as running:
        yield running


@pytest.fixture
async def client(engine: EngineThread) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=engine.base_url.removesuffix("/v1"), timeout=30) as c:
        await c.post("/sim/usage/reset")
        yield c


def _user(text: str) -> list[dict[str, Any]]:
    return [{"role": "system", "content": "Be thorough."}, {"role": "user", "content": text}]


def _body(messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": messages, **extra}


async def _sse(client: httpx.AsyncClient, body: dict[str, Any], **kw: Any) -> list[Any]:
    """The parsed events of a streamed completion; the literal "[DONE]" stays a string."""
    events: list[Any] = []
    async with client.stream("POST", "/v1/chat/completions", json={**body, "stream": True}, **kw) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                events.append(line[6:] if line == "data: [DONE]" else json.loads(line[6:]))
    return events


async def test_health_and_model_list(client: httpx.AsyncClient) -> None:
    assert (await client.get("/health")).status_code == 200
    listed = (await client.get("/v1/models")).json()
    assert listed["object"] == "list"
    assert {m["id"] for m in listed["data"]} >= {"llama-3.2-1b", "llama-3.1-8b", "llama-3.1-70b", "qwen2.5-7b"}


async def test_non_stream_answer_reports_exact_usage(client: httpx.AsyncClient) -> None:
    messages = _user("explain write-ahead logging")
    data = (await client.post("/v1/chat/completions", json=_body(messages, temperature=0.2, seed=7, foo=1))).json()
    assert data["object"] == "chat.completion"
    choice = data["choices"][0]
    assert choice["finish_reason"] == "stop"
    content = choice["message"]["content"]
    assert "explain write-ahead logging" in content
    assert data["usage"] == {
        "prompt_tokens": count_prompt_tokens(messages, None),
        "completion_tokens": len(encode(content)),
        "total_tokens": count_prompt_tokens(messages, None) + len(encode(content)),
    }


async def test_stream_is_role_then_deltas_then_finish_then_usage_then_done(client: httpx.AsyncClient) -> None:
    messages = _user("explain write-ahead logging")
    whole = (await client.post("/v1/chat/completions", json=_body(messages))).json()
    events = await _sse(client, _body(messages))
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert all(c["object"] == "chat.completion.chunk" and c["id"] == chunks[0]["id"] for c in chunks)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    pieces = [c["choices"][0]["delta"].get("content") for c in chunks[1:-2]]
    assert len(pieces) > 3 and all(pieces)
    assert "".join(pieces) == whole["choices"][0]["message"]["content"]
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == whole["usage"]


async def test_streamed_tool_call_uses_openai_delta_format(client: httpx.AsyncClient) -> None:
    messages = _user("b-tree page splits")
    whole = (await client.post("/v1/chat/completions", json=_body(messages, tools=[SEARCH]))).json()
    call = whole["choices"][0]["message"]["tool_calls"][0]
    assert whole["choices"][0]["finish_reason"] == "tool_calls"
    assert call["function"] == {"name": "search", "arguments": json.dumps({"query": "b-tree page splits"})}
    assert whole["usage"]["prompt_tokens"] == count_prompt_tokens(messages, [SEARCH])
    assert whole["usage"]["completion_tokens"] == len(encode("search")) + len(encode(call["function"]["arguments"]))

    events = await _sse(client, _body(messages, tools=[SEARCH], stream_options={"include_usage": True}))
    deltas = [e["choices"][0]["delta"] for e in events[1:-1] if e["choices"]]
    calls = [d["tool_calls"][0] for d in deltas if "tool_calls" in d]
    assert calls[0] == {
        "index": 0,
        "id": call["id"],
        "type": "function",
        "function": {"name": "search", "arguments": ""},
    }
    assert all(set(c) == {"index", "function"} and c["index"] == 0 for c in calls[1:])
    assert "".join(c["function"]["arguments"] for c in calls[1:]) == call["function"]["arguments"]
    assert events[-3]["choices"][0]["finish_reason"] == "tool_calls"
    assert events[-2]["usage"] == whole["usage"]


async def test_max_tokens_cuts_the_answer_exactly(client: httpx.AsyncClient) -> None:
    messages = _user("alpha; beta; gamma; delta")
    data = (await client.post("/v1/chat/completions", json=_body(messages, max_tokens=7))).json()
    assert data["choices"][0]["finish_reason"] == "length"
    assert data["usage"]["completion_tokens"] == 7
    assert len(encode(data["choices"][0]["message"]["content"])) == 7

    events = await _sse(client, _body(messages, max_completion_tokens=9))
    assert events[-3]["choices"][0]["finish_reason"] == "length"
    assert events[-2]["usage"]["completion_tokens"] == 9


async def test_tool_call_that_does_not_fit_becomes_truncated_text(client: httpx.AsyncClient) -> None:
    data = (
        await client.post(
            "/v1/chat/completions",
            json=_body(_user("a rather long subject for a search"), tools=[SEARCH], max_tokens=5),
        )
    ).json()
    choice = data["choices"][0]
    assert choice["finish_reason"] == "length"
    assert "tool_calls" not in choice["message"] and choice["message"]["content"]
    assert data["usage"]["completion_tokens"] == 5


async def test_a_final_assistant_message_is_continued_as_vllm_does(client: httpx.AsyncClient) -> None:
    messages = _user("alpha; beta\nlength: 200 tokens")
    whole = (await client.post("/v1/chat/completions", json=_body(messages))).json()
    text = whole["choices"][0]["message"]["content"]
    prefix = text[:300]
    continued = (
        await client.post(
            "/v1/chat/completions",
            json=_body(
                messages + [{"role": "assistant", "content": prefix}],
                continue_final_message=True,
                add_generation_prompt=False,
            ),
        )
    ).json()
    rest = continued["choices"][0]["message"]["content"]
    assert prefix + rest == text  # only the rest is written, and it is the very rest of that reply
    assert continued["usage"]["completion_tokens"] == len(encode(rest))
    assert continued["usage"]["prompt_tokens"] == count_prompt_tokens(
        messages + [{"role": "assistant", "content": prefix}], None
    )

    both = await client.post(
        "/v1/chat/completions",
        json=_body(messages + [{"role": "assistant", "content": prefix}], continue_final_message=True),
    )
    assert both.status_code == 400 and both.json()["error"]["param"] == "continue_final_message"
    not_assistant = await client.post(
        "/v1/chat/completions", json=_body(messages, continue_final_message=True, add_generation_prompt=False)
    )
    assert not_assistant.status_code == 400 and "last message" in not_assistant.json()["error"]["message"]


async def test_bad_requests_are_refused_with_openai_errors(client: httpx.AsyncClient) -> None:
    missing = await client.post("/v1/chat/completions", json=_body(_user("x")) | {"model": "gpt-17"})
    assert missing.status_code == 404
    assert "gpt-17" in missing.json()["error"]["message"]

    bad_role = await client.post("/v1/chat/completions", json=_body([{"role": "robot", "content": "x"}]))
    assert bad_role.status_code == 400 and "messages.0.role" in bad_role.json()["error"]["message"]
    assert bad_role.json()["error"]["param"] == "messages.0.role"
    no_messages = await client.post("/v1/chat/completions", json={"model": MODEL})
    assert no_messages.status_code == 400 and "messages" in no_messages.json()["error"]["message"]
    zero = await client.post("/v1/chat/completions", json=_body(_user("x"), max_tokens=0))
    assert zero.status_code == 400 and "max_tokens" in zero.json()["error"]["message"]
    not_json = await client.post("/v1/chat/completions", content=b"{nope", headers={"content-type": "application/json"})
    assert not_json.status_code == 400 and "body" in not_json.json()["error"]["message"]

    too_long = await client.post(
        "/v1/chat/completions", json=_body(_user("x")) | {"model": "qwen2.5-7b", "max_tokens": 32_760}
    )
    assert too_long.status_code == 400
    assert "maximum context length is 32768 tokens" in too_long.json()["error"]["message"]
    assert (await client.get("/sim/usage")).json()["total"]["requests"] == 0


async def test_usage_tallies_group_by_model_and_task(client: httpx.AsyncClient) -> None:
    a = (await client.post("/v1/chat/completions", json=_body(_user("one")), headers={"X-Berth-Task": "t-a"})).json()
    b = await _sse(client, _body(_user("two; three")) | {"model": "llama-3.2-1b"}, headers={"X-Berth-Task": "t-b"})
    c = (await client.post("/v1/chat/completions", json=_body(_user("four"), tools=[SEARCH]))).json()
    usage_b = b[-2]["usage"]
    tallies = (await client.get("/sim/usage")).json()

    def counts(*usages: dict[str, int]) -> dict[str, int]:
        return {
            "requests": len(usages),
            "prompt_tokens": sum(u["prompt_tokens"] for u in usages),
            "completion_tokens": sum(u["completion_tokens"] for u in usages),
            "aborted_requests": 0,
            "aborted_prompt_tokens": 0,
            "aborted_completion_tokens": 0,
        }

    assert tallies["total"] == counts(a["usage"], usage_b, c["usage"])
    assert tallies["by_model"] == {MODEL: counts(a["usage"], c["usage"]), "llama-3.2-1b": counts(usage_b)}
    assert tallies["by_task"] == {"t-a": counts(a["usage"]), "t-b": counts(usage_b), "-": counts(c["usage"])}
    await client.post("/sim/usage/reset")
    assert (await client.get("/sim/usage")).json() == {"total": counts(), "by_model": {}, "by_task": {}}


async def test_dropped_stream_counts_as_aborted_with_the_tokens_sent(slow_engine: EngineThread) -> None:
    slow_engine.tally.reset()
    # The 70b model writes ~35 tokens/s, so a ~70-token answer is still streaming when we hang up.
    body = {"model": "llama-3.1-70b", "messages": _user("alpha; beta; gamma; delta"), "stream": True}
    received = 0
    async with httpx.AsyncClient(timeout=30) as c:
        async with c.stream(
            "POST", slow_engine.base_url + "/chat/completions", json=body, headers={"X-Berth-Task": "dropper"}
        ) as response:
            async for line in response.aiter_lines():
                if line.startswith("data: {"):
                    delta = json.loads(line[6:])["choices"][0]["delta"]
                    received += len(encode(delta.get("content") or ""))
                    if received >= 8:
                        break
    for _ in range(200):  # the server notices the hang-up on its next write
        task = slow_engine.tally.snapshot()["by_task"].get("dropper", {})
        if task.get("aborted_requests"):
            break
        await asyncio.sleep(0.02)
    assert task["requests"] == 0 and task["completion_tokens"] == 0
    assert task["aborted_requests"] == 1
    assert task["aborted_prompt_tokens"] == count_prompt_tokens(body["messages"], None)
    assert received <= task["aborted_completion_tokens"] < 40


async def test_non_stream_client_that_leaves_is_aborted_without_tokens(slow_engine: EngineThread) -> None:
    slow_engine.tally.reset()
    body = {"model": "llama-3.1-70b", "messages": _user("slow question")}
    async with httpx.AsyncClient(timeout=0.2) as c:
        with pytest.raises(httpx.TimeoutException):
            await c.post(slow_engine.base_url + "/chat/completions", json=body, headers={"X-Berth-Task": "quitter"})
    for _ in range(200):
        task = slow_engine.tally.snapshot()["by_task"].get("quitter", {})
        if task.get("aborted_requests"):
            break
        await asyncio.sleep(0.02)
    assert task["requests"] == 0 and task["aborted_requests"] == 1 and task["aborted_completion_tokens"] == 0


async def test_requests_overlap_instead_of_queueing(slow_engine: EngineThread) -> None:
    order: list[tuple[str, int]] = []

    async def one(c: httpx.AsyncClient, i: int) -> None:
        body = {"model": MODEL, "messages": _user(f"subject {i}"), "stream": True}
        async with c.stream("POST", slow_engine.base_url + "/chat/completions", json=body) as response:
            first = True
            async for line in response.aiter_lines():
                if first and line.startswith("data: {"):
                    order.append(("first", i))
                    first = False
            order.append(("done", i))

    async with httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_connections=20)) as c:
        await asyncio.gather(*(one(c, i) for i in range(8)))
    # Every stream had started before any finished: nothing waited for another request.
    assert [kind for kind, _ in order[:8]] == ["first"] * 8


async def test_tool_call_round_trip_through_litellm(engine: EngineThread) -> None:
    import litellm

    messages = _user("rust async runtimes; zig comptime")
    calls_made: list[str] = []
    for _ in range(5):
        stream = await litellm.acompletion(
            model=f"hosted_vllm/{MODEL}",
            api_base=engine.base_url,
            api_key="x",
            messages=messages,
            tools=[SEARCH],
            stream=True,
            stream_options={"include_usage": True},
            max_tokens=400,
            extra_headers={"X-Berth-Task": "via-litellm"},
        )
        chunks = [chunk async for chunk in stream]
        response = litellm.stream_chunk_builder(chunks, messages=messages)
        assert response.usage.prompt_tokens == count_prompt_tokens(messages, [SEARCH])
        message = response.choices[0].message
        if not message.tool_calls:
            break
        assert response.choices[0].finish_reason == "tool_calls"
        call = message.tool_calls[0]
        assert response.usage.completion_tokens == len(encode(call.function.name)) + len(
            encode(call.function.arguments)
        )
        calls_made.append(json.loads(call.function.arguments)["query"])
        messages = messages + [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {"name": call.function.name, "arguments": call.function.arguments},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": call.id, "content": f"3 sources about {calls_made[-1]}"},
        ]
    assert calls_made == ["rust async runtimes", "zig comptime"]
    assert response.choices[0].finish_reason == "stop"
    assert "Findings on zig comptime: 3 sources about zig comptime" in message.content
    assert response.usage.completion_tokens == len(encode(message.content))
    assert engine.tally.snapshot()["by_task"]["via-litellm"]["requests"] == 3


async def test_litellm_non_stream_and_context_error(engine: EngineThread) -> None:
    import litellm

    messages = _user("hello")
    response = await litellm.acompletion(
        model=f"hosted_vllm/{MODEL}", api_base=engine.base_url, api_key="x", messages=messages, max_tokens=5
    )
    assert response.choices[0].finish_reason == "length"
    assert response.usage.completion_tokens == 5
    assert response.usage.prompt_tokens == count_prompt_tokens(messages, None)
    with pytest.raises(litellm.ContextWindowExceededError):
        await litellm.acompletion(
            model="hosted_vllm/qwen2.5-7b", api_base=engine.base_url, api_key="x", messages=messages, max_tokens=40_000
        )
