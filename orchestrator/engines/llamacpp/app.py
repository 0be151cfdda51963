"""The llama.cpp replica's HTTP face: the slice of the OpenAI chat API that Berth's node path uses.

The same slice the simulated engine serves and vLLM answers, so litellm's `hosted_vllm/` route
reaches it unchanged: SSE chunks, the usage chunk with `stream_options.include_usage`, tool-call
deltas (where the model's template has tool syntax), `continue_final_message`, OpenAI-style
errors that name the field, and the `Idempotency-Key` replay Berth's LLM step relies on. Every
request goes to the usage journal the simulated engine keeps (`orchestrator.engines.usage`):
completed once its reply was delivered, aborted with the tokens generated when the client left.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from orchestrator.engines.simulated.replay import IDEMPOTENCY_HEADER, FinishedReplies, fingerprint
from orchestrator.engines.usage import UsageTally

from ..serving import ReportingStream
from .chat import ChatTemplateError, ParsedCall, ToolCallStream
from .model import LlamaModel, Piece, Sampling

TASK_HEADER = "X-Berth-Task"
MAX_STOP_STRINGS = 4  # OpenAI's limit


class _Message(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None


class _Function(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str = Field(min_length=1)


class _Tool(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["function"] = "function"
    function: _Function


class ChatRequest(BaseModel):
    """The fields of POST /v1/chat/completions this engine reads; others are ignored, as vLLM does."""

    model_config = ConfigDict(extra="ignore")
    model: str = Field(min_length=1)
    messages: list[_Message] = Field(min_length=1)
    tools: list[_Tool] | None = None
    tool_choice: Literal["none", "auto"] | None = None  # forcing a call needs a grammar this engine does not build
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    seed: int | None = Field(default=None, ge=0, lt=2**32)
    stop: str | list[str] | None = None
    n: int = Field(default=1, ge=1, le=1)  # one context, one sequence
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    continue_final_message: bool = False  # vLLM's: go on writing the last (assistant) message
    add_generation_prompt: bool = True


@dataclass
class _Reply:
    """What one generation produced, kept whole for the non-streamed answer and for an idempotent replay."""

    id: str
    created: int
    prompt_tokens: int
    deltas: list[dict[str, Any]] = field(default_factory=list)
    content: str = ""
    calls: list[dict[str, Any]] = field(default_factory=list)
    completion_tokens: int = 0
    finish_reason: str = "stop"
    first_token_at: float | None = None  # monotonic: when the first generated text was handed to the transport


class TimingsLog:
    """Each streamed request's engine-side instants (monotonic clock, which every process on a Linux host
    shares): received, first token sent, last chunk sent. A client on the same host subtracts them from its
    own to tell what it added from what the engine took (benchmarks/real_engine.py)."""

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


def create_app(
    model: LlamaModel,
    served_name: str,
    tally: UsageTally | None = None,
    default_temperature: float = 1.0,
    timings: TimingsLog | None = None,
) -> FastAPI:
    """The server over an already loaded model: it is ready (lists the model) as soon as it listens."""
    usage = tally or UsageTally()
    finished: FinishedReplies[_Reply] = FinishedReplies()
    app = FastAPI(title="Berth llama.cpp engine")
    app.state.tally = usage

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/models")
    async def list_models() -> dict[str, Any]:
        return {
            "object": "list",
            "data": [
                {
                    "id": served_name,
                    "object": "model",
                    "created": 0,
                    "owned_by": "berth-llama.cpp",
                    "max_model_len": model.n_ctx,
                }
            ],
        }

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        received = time.monotonic()
        try:
            body = json.loads(await request.body())
            if not isinstance(body, dict):
                return _error(400, "body: expected a JSON object", "body")
            chat = ChatRequest.model_validate(body)
        except ValueError as exc:  # json.JSONDecodeError and pydantic.ValidationError are both ValueErrors
            return _error(400, *_describe_invalid(exc))
        if chat.model != served_name:
            return _error(
                404,
                f"The model `{chat.model}` does not exist; this replica serves `{served_name}`.",
                "model",
                "NotFoundError",
            )
        if chat.continue_final_message and chat.add_generation_prompt:
            return _error(
                400,
                "continue_final_message: cannot be true together with add_generation_prompt",
                "continue_final_message",
            )
        stops = (chat.stop,) if isinstance(chat.stop, str) else tuple(chat.stop or ())
        if len(stops) > MAX_STOP_STRINGS:
            return _error(400, f"stop: at most {MAX_STOP_STRINGS} stop strings, got {len(stops)}", "stop")
        tools = body.get("tools") if chat.tools and chat.tool_choice != "none" else None
        try:
            prompt = model.template.render(body["messages"], tools, chat.continue_final_message)
        except ChatTemplateError as exc:
            return _error(400, str(exc), exc.field)
        prompt_ids = await asyncio.to_thread(model.tokenize, prompt.text)
        asked = chat.max_completion_tokens or chat.max_tokens
        max_tokens = asked or model.n_ctx - len(prompt_ids)
        if len(prompt_ids) + max_tokens > model.n_ctx or max_tokens < 1:
            return _error(
                400,
                (
                    f"This model's maximum context length is {model.n_ctx} tokens. However, you requested "
                    f"{len(prompt_ids) + max_tokens} tokens ({len(prompt_ids)} in the messages, {max_tokens} in the "
                    "completion). Please reduce the length of the messages or completion."
                ),
                "messages",
            )
        include_usage = bool((chat.stream_options or {}).get("include_usage"))
        key = request.headers.get(IDEMPOTENCY_HEADER)
        same_request = (
            fingerprint(served_name, body["messages"], tools) + f"/{int(chat.continue_final_message)}" if key else ""
        )
        earlier = finished.get(key, same_request, max_tokens)
        if earlier is not None:  # the same step again, already answered: hand that reply back, generate nothing
            if chat.stream:
                return ReportingStream(_replayed(earlier, served_name, include_usage), on_close=lambda: None)
            return _completion(earlier, served_name)
        sampling = Sampling(
            max_tokens=max_tokens,
            stop=stops,
            temperature=default_temperature if chat.temperature is None else chat.temperature,
            top_p=1.0 if chat.top_p is None else chat.top_p,
            seed=chat.seed,
        )
        reply = _Reply(f"chatcmpl-{uuid.uuid4().hex}", int(time.time()), len(prompt_ids))
        task = request.headers.get(TASK_HEADER)
        generation = model.start(prompt_ids, sampling)
        parser = ToolCallStream() if tools else None
        delivered = False

        def completed() -> None:
            nonlocal delivered
            if timings is not None:
                timings.record(
                    task, reply.id, received, reply.first_token_at, time.monotonic(), reply.completion_tokens
                )
            usage.completed(served_name, task, reply.prompt_tokens, reply.completion_tokens)
            finished.remember(key, same_request, reply.completion_tokens, reply)
            delivered = True

        def aborted() -> None:
            # Stop the generation, and journal what it had generated once the model's thread has let go.
            if delivered:
                return
            generation.cancel()
            generation.outcome.add_done_callback(
                lambda f: usage.aborted(
                    served_name,
                    task,
                    reply.prompt_tokens,
                    f.result().completion_tokens if not f.cancelled() and f.exception() is None else 0,
                )
            )

        if chat.stream:
            return ReportingStream(
                _stream(generation.pieces, generation.outcome, reply, parser, served_name, include_usage, completed),
                on_close=aborted,
            )
        if await _client_left(request, generation.outcome):
            aborted()
            return Response(status_code=499)
        async for delta in _deltas(generation.pieces, reply, parser):
            reply.deltas.append(delta)
        outcome = generation.outcome.result()
        reply.completion_tokens = outcome.completion_tokens
        reply.finish_reason = _finish_reason(outcome.finish_reason, reply)
        completed()
        return _completion(reply, served_name)

    return app


async def _deltas(
    pieces: asyncio.Queue[Piece | None], reply: _Reply, parser: ToolCallStream | None
) -> AsyncIterator[dict[str, Any]]:
    """The OpenAI deltas of a generation's pieces: text, or whole tool calls when the request offered tools."""
    while (piece := await pieces.get()) is not None:
        parts: list[str | ParsedCall] = parser.feed(piece.text) if parser is not None else [piece.text]
        for part in parts:
            if delta := _delta(part, reply):
                yield delta
    for part in parser.finish() if parser is not None else []:
        if delta := _delta(part, reply):
            yield delta


def _delta(part: str | ParsedCall, reply: _Reply) -> dict[str, Any] | None:
    if isinstance(part, str):
        if not part:
            return None
        reply.content += part
        return {"content": part}
    call = {
        "id": f"call_{uuid.uuid4().hex[:24]}",
        "type": "function",
        "function": {"name": part.name, "arguments": part.arguments},
    }
    reply.calls.append(call)
    return {"tool_calls": [{"index": len(reply.calls) - 1, **call}]}


def _finish_reason(outcome: str, reply: _Reply) -> str:
    return "tool_calls" if reply.calls and outcome == "stop" else outcome


async def _stream(
    pieces: asyncio.Queue[Piece | None],
    outcome: asyncio.Future[Any],
    reply: _Reply,
    parser: ToolCallStream | None,
    served_name: str,
    include_usage: bool,
    on_complete: Callable[[], None],
) -> AsyncGenerator[str, None]:
    yield _event(reply, served_name, {"role": "assistant", "content": ""})
    async for delta in _deltas(pieces, reply, parser):
        reply.deltas.append(delta)
        yield _event(reply, served_name, delta)
        if reply.first_token_at is None:
            reply.first_token_at = time.monotonic()
    result = await outcome
    reply.completion_tokens = result.completion_tokens
    reply.finish_reason = _finish_reason(result.finish_reason, reply)
    # Journal before the last write: a client that reads [DONE] and then reads the journal finds it there.
    on_complete()
    yield _closing(reply, served_name, include_usage)


async def _replayed(reply: _Reply, served_name: str, include_usage: bool) -> AsyncGenerator[str, None]:
    yield _event(reply, served_name, {"role": "assistant", "content": ""})
    for delta in reply.deltas:
        yield _event(reply, served_name, delta)
    yield _closing(reply, served_name, include_usage)


def _closing(reply: _Reply, served_name: str, include_usage: bool) -> str:
    usage = (
        _sse(
            {
                "id": reply.id,
                "object": "chat.completion.chunk",
                "created": reply.created,
                "model": served_name,
                "choices": [],
                "usage": _usage(reply),
            }
        )
        if include_usage
        else ""
    )
    return _event(reply, served_name, {}, reply.finish_reason) + usage + "data: [DONE]\n\n"


async def _client_left(request: Request, outcome: asyncio.Future[Any]) -> bool:
    """Wait for the generation to end; True if the client hung up first (the generation is then stopped)."""

    async def disconnected() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    watcher = asyncio.ensure_future(disconnected())
    try:
        done, _ = await asyncio.wait({watcher, outcome}, return_when=asyncio.FIRST_COMPLETED)
        return watcher in done and not outcome.done()
    finally:
        watcher.cancel()


def _completion(reply: _Reply, served_name: str) -> JSONResponse:
    message: dict[str, Any] = {"role": "assistant", "content": reply.content or None}
    if reply.calls:
        message["tool_calls"] = reply.calls
    elif not reply.content:
        message["content"] = ""
    return JSONResponse(
        {
            "id": reply.id,
            "object": "chat.completion",
            "created": reply.created,
            "model": served_name,
            "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": reply.finish_reason}],
            "usage": _usage(reply),
        }
    )


def _usage(reply: _Reply) -> dict[str, int]:
    return {
        "prompt_tokens": reply.prompt_tokens,
        "completion_tokens": reply.completion_tokens,
        "total_tokens": reply.prompt_tokens + reply.completion_tokens,
    }


def _event(reply: _Reply, served_name: str, delta: dict[str, Any], finish_reason: str | None = None) -> str:
    return _sse(
        {
            "id": reply.id,
            "object": "chat.completion.chunk",
            "created": reply.created,
            "model": served_name,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
        }
    )


def _sse(payload: dict[str, Any]) -> str:
    return f"data: {json.dumps(payload, ensure_ascii=False, separators=(',', ':'))}\n\n"


def _describe_invalid(exc: ValueError) -> tuple[str, str]:
    """(message naming the field, the field) for a body that cannot be read."""
    if isinstance(exc, ValidationError):
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "body"
        return f"{where}: {first['msg']}", where
    return f"body: not valid JSON ({exc})", "body"


def _error(status: int, message: str, param: str | None = None, kind: str = "BadRequestError") -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind, "param": param, "code": status}}, status)
