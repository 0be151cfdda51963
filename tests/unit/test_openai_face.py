"""The OpenAI face over an engine that is only a script of deltas: what it puts on the wire is the face's own
(message, finish, usage, SSE framing, refusals, the usage journal), whichever engine is behind it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
from fastapi import FastAPI

from orchestrator.engines.chat_engine import ChatRequest, Delta, Ending, Prompt, Refusal
from orchestrator.engines.openai_face import ChatFace
from orchestrator.engines.usage import UsageTally

CALL = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "search", "arguments": '{"q": "H100"}'}}
SCRIPT = [Delta({"content": "Let me look. "}, 3), Delta({"tool_calls": [CALL]}, 5)]


class _Scripted:
    async def prefilled(self) -> None:
        return None

    async def deltas(self) -> AsyncIterator[Delta]:
        for delta in SCRIPT:
            yield delta

    async def whole(self) -> list[Delta]:
        return list(SCRIPT)

    async def ending(self) -> Ending:
        return Ending("tool_calls", 8)

    def abandon(self, sent_tokens: int, record: Callable[[int], None]) -> None:
        record(sent_tokens)


class _ScriptedEngine:
    request_type = ChatRequest
    usage_unasked = False

    def context_window(self, model: str) -> int:
        if model != "scripted":
            raise Refusal(f"The model `{model}` does not exist.", "model", status=404, kind="NotFoundError")
        return 100

    async def read_prompt(self, chat: ChatRequest, body: dict[str, Any], body_bytes: int) -> Prompt[None]:
        return Prompt(len(chat.messages) * 10, None)

    def generate(self, chat: ChatRequest, prompt: Prompt[None], max_tokens: int) -> _Scripted:
        return _Scripted()


def _client(tally: UsageTally) -> httpx.AsyncClient:
    app = FastAPI()
    ChatFace(_ScriptedEngine(), tally).mount(app)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://engine")


BODY = {"model": "scripted", "messages": [{"role": "user", "content": "H100?"}]}


async def test_a_reply_not_streamed_is_its_deltas_put_together() -> None:
    tally = UsageTally()
    async with _client(tally) as client:
        reply = (await client.post("/v1/chat/completions", json=BODY, headers={"X-Berth-Task": "t"})).json()
    call = {k: v for k, v in CALL.items() if k != "index"}
    assert reply["choices"][0]["message"] == {"role": "assistant", "content": "Let me look. ", "tool_calls": [call]}
    assert reply["choices"][0]["finish_reason"] == "tool_calls"
    assert reply["usage"] == {"prompt_tokens": 10, "completion_tokens": 8, "total_tokens": 18}
    by_task = tally.snapshot()["by_task"]
    assert isinstance(by_task, dict) and by_task["t"]["requests"] == 1


async def test_a_stream_is_role_deltas_finish_then_usage_only_when_asked() -> None:
    async with _client(UsageTally()) as client:
        for asked in (False, True):
            body = BODY | {"stream": True, "stream_options": {"include_usage": asked}}
            text = (await client.post("/v1/chat/completions", json=body)).text
            events = [line[6:] for line in text.split("\n\n") if line.startswith("data: ")]
            assert events[-1] == "[DONE]"
            chunks = [json.loads(e) for e in events[:-1]]
            assert [c["choices"][0]["delta"] for c in chunks[:3]] == [
                {"role": "assistant", "content": ""},
                *(d.fields for d in SCRIPT),
            ]
            assert chunks[3]["choices"][0]["finish_reason"] == "tool_calls"
            assert (chunks[4]["usage"]["completion_tokens"] == 8) if asked else len(chunks) == 4


async def test_refusals_name_the_field() -> None:
    async with _client(UsageTally()) as client:
        unknown = await client.post("/v1/chat/completions", json=BODY | {"model": "other"})
        over = await client.post("/v1/chat/completions", json=BODY | {"max_tokens": 91})
    assert unknown.status_code == 404 and unknown.json()["error"]["param"] == "model"
    assert over.status_code == 400 and over.json()["error"]["param"] == "messages"
    assert "maximum context length is 100 tokens" in over.json()["error"]["message"]
