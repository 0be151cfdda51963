"""The OpenAI-compatible HTTP face of every engine Berth serves itself: `POST /v1/chat/completions`.

The simulated engine and the llama.cpp engine answer the same slice of the API that vLLM does, so litellm's
`hosted_vllm/` route and Berth's own model client reach them unchanged. What that slice asks of a server is
written once, here: reading and refusing the body (OpenAI-style errors that name the field), the context
check, the `Idempotency-Key` replay of a finished reply, SSE framing (role chunk, deltas, finish chunk, usage
chunk, `[DONE]`), the reply's message and usage, the usage journal (`usage.py`: a request is completed once
its whole reply was delivered, aborted when its client left), and stopping when the client leaves. What differs
between engines is behind `chat_engine.ChatEngine`.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError

from .chat_engine import ChatEngine, ChatRequest, Ending, Generation, Prompt, Refusal
from .replay import IDEMPOTENCY_HEADER, FinishedReplies, fingerprint
from .serving import ReportingStream
from .usage import UsageTally

T = TypeVar("T")
RequestT = TypeVar("RequestT", bound=ChatRequest)

TASK_HEADER = "X-Berth-Task"  # whose request it is, for the usage journal's per-task counts
CLIENT_LEFT = 499  # the status of a reply not streamed whose client hung up first (nginx's)


@dataclass
class _Reply:
    """One answer as it went out, kept whole for the reply not streamed and for an idempotent replay."""

    id: str
    created: int
    model: str
    prompt_tokens: int
    deltas: list[dict[str, Any]] = field(default_factory=list)
    ending: Ending = Ending("stop", 0)
    first_token_at: float | None = None  # monotonic: when the first delta was handed to the transport


class TimingsLog:
    """Each request's engine-side instants (monotonic clock, which every process on a Linux host shares):
    received, first token sent, last chunk sent. A client on the same host subtracts them from its own to
    tell what it added from what the engine took (benchmarks/real_engine.py)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)

    def record(
        self,
        task: str | None,
        reply_id: str,
        received: float,
        first_token: float | None,
        finished: float,
        completion_tokens: int,
    ) -> None:
        line = json.dumps(
            {
                "task": task,
                "id": reply_id,
                "received_s": received,
                "first_token_s": first_token,
                "finished_s": finished,
                "completion_tokens": completion_tokens,
            }
        )
        with self.path.open("a", encoding="utf-8") as f:
            f.write(line + "\n")


class ChatFace(Generic[RequestT, T]):
    """`POST /v1/chat/completions` over one engine; `mount` adds it to the engine's app."""

    def __init__(self, engine: ChatEngine[RequestT, T], tally: UsageTally, timings: TimingsLog | None = None) -> None:
        self.engine = engine
        self.tally = tally
        self.timings = timings
        self.finished: FinishedReplies[_Reply] = FinishedReplies()

    def mount(self, app: FastAPI) -> None:
        app.add_api_route("/v1/chat/completions", self.chat_completions, methods=["POST"])

    async def chat_completions(self, request: Request) -> Response:
        received = time.monotonic()
        try:
            chat, body, prompt, max_tokens = await self._accept(await request.body())
        except Refusal as refusal:
            return _error(refusal)
        include_usage = self.engine.usage_unasked or bool((chat.stream_options or {}).get("include_usage"))
        key = request.headers.get(IDEMPOTENCY_HEADER)
        same_request = _same_request(chat, body) if key else ""
        earlier = self.finished.get(key, same_request, max_tokens)
        if earlier is not None:  # the same step again, already answered: hand that reply back, generate nothing
            if chat.stream:
                return ReportingStream(_replayed(earlier, include_usage), on_close=lambda: None)
            return _completion(earlier)
        reply = _Reply(f"chatcmpl-{uuid.uuid4().hex}", int(time.time()), chat.model, prompt.tokens)
        task = request.headers.get(TASK_HEADER)
        generation = self.engine.generate(chat, prompt, max_tokens)
        sent = _Sent()

        def completed() -> None:
            if self.timings is not None:
                self.timings.record(
                    task, reply.id, received, reply.first_token_at, time.monotonic(), reply.ending.completion_tokens
                )
            self.tally.completed(reply.model, task, reply.prompt_tokens, reply.ending.completion_tokens)
            self.finished.remember(key, same_request, reply.ending.completion_tokens, reply)
            sent.all = True

        def aborted() -> None:
            if not sent.all:
                generation.abandon(
                    sent.tokens, lambda tokens: self.tally.aborted(reply.model, task, reply.prompt_tokens, tokens)
                )

        if chat.stream:
            return ReportingStream(_stream(generation, reply, sent, include_usage, completed), on_close=aborted)
        whole = await _unless_client_leaves(request, generation.whole())
        if whole is None:
            aborted()
            return Response(status_code=CLIENT_LEFT)
        reply.deltas = [delta.fields for delta in whole]
        reply.ending = await generation.ending()
        completed()
        return _completion(reply)

    async def _accept(self, raw: bytes) -> tuple[RequestT, dict[str, Any], Prompt[T], int]:
        """The request, its body, its prompt and the completion tokens it may have; `Refusal` says why not."""
        try:
            body = json.loads(raw)
            if not isinstance(body, dict):
                raise Refusal("body: expected a JSON object", "body")
            chat = self.engine.request_type.model_validate(body)
        except ValueError as exc:  # json.JSONDecodeError and pydantic.ValidationError are both ValueErrors
            raise _invalid(exc) from exc
        context = self.engine.context_window(chat.model)
        if chat.continue_final_message and chat.add_generation_prompt:
            raise Refusal(
                "continue_final_message: cannot be true together with add_generation_prompt", "continue_final_message"
            )
        prompt = await self.engine.read_prompt(chat, body, len(raw))
        max_tokens = chat.max_completion_tokens or chat.max_tokens or max(context - prompt.tokens, 0)
        if prompt.tokens + max_tokens > context or max_tokens < 1:
            raise Refusal(
                f"This model's maximum context length is {context} tokens. However, you requested "
                f"{prompt.tokens + max_tokens} tokens ({prompt.tokens} in the messages, {max_tokens} in the "
                "completion). Please reduce the length of the messages or completion.",
                "messages",
            )
        return chat, body, prompt, max_tokens


@dataclass
class _Sent:
    tokens: int = 0  # completion tokens handed to the transport
    all: bool = False  # the whole reply was delivered (and journaled as completed)


def _same_request(chat: ChatRequest, body: dict[str, Any]) -> str:
    """What makes a retry the same generation (see replay.py): the conversation, the tools offered and how, and
    whether the last message is continued."""
    asked = [body.get("tools") or None, body.get("tool_choice"), chat.continue_final_message]
    return fingerprint(chat.model, body["messages"], asked)


async def _stream(
    generation: Generation, reply: _Reply, sent: _Sent, include_usage: bool, on_complete: Callable[[], None]
) -> AsyncGenerator[str, None]:
    await generation.prefilled()
    yield _event(reply, {"role": "assistant", "content": ""})
    async for delta in generation.deltas():
        reply.deltas.append(delta.fields)
        yield _event(reply, delta.fields)
        sent.tokens += delta.tokens  # counted once the chunk is handed to the transport
        if reply.first_token_at is None:
            reply.first_token_at = time.monotonic()
    reply.ending = await generation.ending()
    # Journal before the last write: a client that reads [DONE] and then reads the journal finds it there.
    on_complete()
    yield _closing(reply, include_usage)


async def _replayed(reply: _Reply, include_usage: bool) -> AsyncGenerator[str, None]:
    yield _event(reply, {"role": "assistant", "content": ""})
    for delta in reply.deltas:
        yield _event(reply, delta)
    yield _closing(reply, include_usage)


async def _unless_client_leaves(request: Request, work: Awaitable[T]) -> T | None:
    """`work`'s result, or None if the client hung up first (the work is then cancelled)."""

    async def disconnected() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(disconnected())
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
    if not task.done():
        task.cancel()
        return None
    return task.result()


def _message(deltas: list[dict[str, Any]]) -> dict[str, Any]:
    """The whole reply's message, put together from its deltas as a client of the stream would."""
    content = "".join(delta.get("content") or "" for delta in deltas)
    calls: list[dict[str, Any]] = []
    for delta in deltas:
        for part in delta.get("tool_calls") or ():
            function = part.get("function") or {}
            if "id" in part:  # a call's first delta
                calls.append(
                    {
                        "id": part["id"],
                        "type": part.get("type", "function"),
                        "function": {"name": function.get("name", ""), "arguments": function.get("arguments", "")},
                    }
                )
            else:
                calls[part["index"]]["function"]["arguments"] += function.get("arguments", "")
    message: dict[str, Any] = {"role": "assistant", "content": content or None}
    if calls:
        message["tool_calls"] = calls
    elif not content:
        message["content"] = ""
    return message


def _completion(reply: _Reply) -> JSONResponse:
    choice = {
        "index": 0,
        "message": _message(reply.deltas),
        "logprobs": None,
        "finish_reason": reply.ending.finish_reason,
    }
    return JSONResponse(
        {
            "id": reply.id,
            "object": "chat.completion",
            "created": reply.created,
            "model": reply.model,
            "choices": [choice],
            "usage": _usage(reply),
        }
    )


def _closing(reply: _Reply, include_usage: bool) -> str:
    usage = (
        _sse(
            {
                "id": reply.id,
                "object": "chat.completion.chunk",
                "created": reply.created,
                "model": reply.model,
                "choices": [],
                "usage": _usage(reply),
            }
        )
        if include_usage
        else ""
    )
    return _event(reply, {}, reply.ending.finish_reason) + usage + "data: [DONE]\n\n"


def _usage(reply: _Reply) -> dict[str, int]:
    completion = reply.ending.completion_tokens
    return {
        "prompt_tokens": reply.prompt_tokens,
        "completion_tokens": completion,
        "total_tokens": reply.prompt_tokens + completion,
    }


def _event(reply: _Reply, delta: dict[str, Any], finish_reason: str | None = None) -> str:
    return _sse(
        {
            "id": reply.id,
            "object": "chat.completion.chunk",
            "created": reply.created,
            "model": reply.model,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
        }
    )


def _sse(payload: dict[str, Any]) -> str:
    return f"data: {json.dumps(payload, ensure_ascii=False, separators=(',', ':'))}\n\n"


def _invalid(exc: ValueError) -> Refusal:
    """The refusal of a body that cannot be read, naming the field."""
    if isinstance(exc, ValidationError):
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "body"
        return Refusal(f"{where}: {first['msg']}", where)
    return Refusal(f"body: not valid JSON ({exc})", "body")


def _error(refusal: Refusal) -> JSONResponse:
    error = {"message": refusal.message, "type": refusal.kind, "param": refusal.param, "code": refusal.status}
    return JSONResponse({"error": error}, refusal.status)
