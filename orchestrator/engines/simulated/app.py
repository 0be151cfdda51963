"""The simulated engine's HTTP face: the slice of vLLM's OpenAI-compatible API that Berth uses.

Agents reach this server only through litellm's `hosted_vllm/` route, exactly as they
reach vLLM, so everything litellm relies on is real: SSE framing, streamed tool-call
deltas, the trailing usage chunk, OpenAI-style errors, and time spent waiting for the
first token and for each token after it (`asyncio.sleep`, so requests overlap freely).
Prompt tokens are counted with `activities.tokens`, the counter Berth reserves budget
with, so a step's reservation and the engine's usage agree exactly. Like vLLM, it continues
a final assistant message given with `continue_final_message` (how Berth resumes a
generation a preemption cut off without paying for its tokens twice).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from activities import tokens
from sdk.wire.output import REPAIR_SCHEMA_MARK

from ..serving import ReportingStream
from .models import DEFAULT_MODELS, SimulatedModel
from .policy import PlannedCall, Reply, reply
from .replay import IDEMPOTENCY_HEADER, FinishedReplies, fingerprint
from .structured import instance
from .usage import UsageTally

TASK_HEADER = "X-Berth-Task"
CHUNK_TOKENS = 4  # tokens per streamed chunk: smooth enough for a UI, a quarter of the wake-ups
BIG_BODY_BYTES = 64_000  # above this, counting the prompt (~ms per 10 k tokens) moves off the event loop


class _Function(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str = Field(min_length=1)
    parameters: dict[str, Any] | None = None


class _Tool(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["function"] = "function"
    function: _Function


class _Message(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None


class ChatRequest(BaseModel):
    """The fields of POST /v1/chat/completions the engine reads; any other field is ignored."""

    model_config = ConfigDict(extra="ignore")
    model: str = Field(min_length=1)
    messages: list[_Message] = Field(min_length=1)
    tools: list[_Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None  # false: at most one tool call a reply
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    temperature: float | None = Field(default=None, ge=0, le=2)  # accepted; replies are deterministic anyway
    top_p: float | None = Field(default=None, gt=0, le=1)  # the same
    seed: int | None = Field(default=None, ge=0, lt=2**32)  # the same
    stop: str | list[str] | None = Field(default=None, max_length=4)  # applied: the text ends before the first
    response_format: dict[str, Any] | None = None  # a json_schema one is applied (structured.py)
    continue_final_message: bool = False  # vLLM's: go on writing the last (assistant) message
    add_generation_prompt: bool = True


@dataclass
class _Generation:
    """A reply cut to max_tokens and split into streamable deltas, each with its token count."""

    deltas: list[tuple[dict[str, Any], int]]
    message: dict[str, Any]
    finish_reason: str
    completion_tokens: int


@dataclass
class _StreamProgress:
    sent_tokens: int = 0
    completed: bool = False


@dataclass
class _Call:
    """One accepted request: what the tallies and the chunks need to know about it."""

    id: str
    model: SimulatedModel
    task: str | None
    prompt_tokens: int
    created: int = field(default_factory=lambda: int(time.time()))


def warm_up_tokenizer() -> None:
    """Load the tokenizers (litellm's import is most of an engine's start-up); cheap once done."""
    tokens.count_prompt_tokens([{"role": "user", "content": "warm up"}], None)
    tokens.encode("warm up")


def create_app(
    models: Sequence[SimulatedModel] = DEFAULT_MODELS, latency_scale: float = 1.0, tally: UsageTally | None = None
) -> FastAPI:
    """The engine as an ASGI app; `latency_scale` multiplies every wait (0 = answer at once)."""
    if latency_scale < 0:
        raise ValueError(f"latency_scale: must be >= 0, got {latency_scale}")
    served = {m.name: m for m in models}
    usage = tally or UsageTally()
    finished: FinishedReplies[tuple[_Call, _Generation]] = FinishedReplies()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # Importing litellm (for its tokenizer) takes seconds: pay it before /health answers,
        # not inside the first request's time to first token.
        await asyncio.to_thread(warm_up_tokenizer)
        yield

    app = FastAPI(title="Berth simulated inference engine", lifespan=lifespan)
    app.state.tally = usage
    app.state.models = served

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/models")
    async def list_models() -> dict[str, Any]:
        return {
            "object": "list",
            "data": [
                {
                    "id": m.name,
                    "object": "model",
                    "created": 0,
                    "owned_by": "berth-simulated",
                    "max_model_len": m.context_window,
                }
                for m in served.values()
            ],
        }

    @app.get("/sim/usage")
    async def get_usage() -> dict[str, object]:
        return usage.snapshot()

    @app.post("/sim/usage/reset")
    async def reset_usage() -> dict[str, object]:
        usage.reset()
        return usage.snapshot()

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        raw = await request.body()
        try:
            body = json.loads(raw)
            if not isinstance(body, dict):
                return _error(400, "body: expected a JSON object", "BadRequestError", "body")
            chat = ChatRequest.model_validate(body)
        except ValueError as exc:  # json.JSONDecodeError and pydantic.ValidationError are both ValueErrors
            return _error(400, *_describe_invalid(exc))
        model = served.get(chat.model)
        if model is None:
            return _error(404, f"The model `{chat.model}` does not exist.", "NotFoundError", "model")
        messages, tool_defs = body["messages"], body.get("tools") or None
        prefix: str | None = None
        if chat.continue_final_message:
            if problem := _unusable_prefix(chat):
                return _error(400, problem, "BadRequestError", "continue_final_message")
            prefix = str(messages[-1]["content"])
        try:
            if len(raw) > BIG_BODY_BYTES:
                prompt_tokens = await asyncio.to_thread(tokens.count_prompt_tokens, messages, tool_defs)
            else:
                prompt_tokens = tokens.count_prompt_tokens(messages, tool_defs)
        except Exception as exc:  # litellm's counter raises assorted types on shapes it cannot read
            return _error(400, f"messages: cannot count the prompt's tokens ({exc})", "BadRequestError", "messages")
        max_tokens = chat.max_completion_tokens or chat.max_tokens or max(model.context_window - prompt_tokens, 0)
        if prompt_tokens + max_tokens > model.context_window or max_tokens < 1:
            return _error(
                400,
                (
                    f"This model's maximum context length is {model.context_window} tokens. However, you requested "
                    f"{prompt_tokens + max_tokens} tokens ({prompt_tokens} in the messages, {max_tokens} in the "
                    "completion). Please reduce the length of the messages or completion."
                ),
                "BadRequestError",
                "messages",
            )
        key = request.headers.get(IDEMPOTENCY_HEADER)
        same_request = fingerprint(model.name, messages, tool_defs) if key else ""
        earlier = finished.get(key, same_request, max_tokens)
        if earlier is not None:  # the same step again: hand back the finished reply, generate nothing
            call, generation = earlier
            if chat.stream:
                return ReportingStream(_stream(call, generation, 0.0, _StreamProgress(), lambda: None), lambda: None)
            return _completion(call, generation)
        call = _Call(f"chatcmpl-{uuid.uuid4().hex}", model, request.headers.get(TASK_HEADER), prompt_tokens)
        if prefix is None:
            answer = _as_chosen(reply(model.name, messages, _tools_for(chat.tool_choice, tool_defs)), chat, tool_defs)
            schema = _json_schema(chat.response_format) or _schema_asked_for(messages)
            if schema is not None and not answer.tool_calls:
                answer = Reply(content=json.dumps(instance(schema, answer.content or "")))
            generation = _render(answer, max_tokens, _stops(chat.stop))
        else:
            answer = reply(model.name, messages[:-1], _tools_for(chat.tool_choice, tool_defs))
            generation = _render(Reply(content=_continuation(answer, prefix)), max_tokens, _stops(chat.stop))

        def done() -> None:
            usage.completed(model.name, call.task, prompt_tokens, generation.completion_tokens)
            finished.remember(key, same_request, generation.completion_tokens, (call, generation))

        if chat.stream:
            progress = _StreamProgress()
            return ReportingStream(
                _stream(call, generation, latency_scale, progress, done),
                on_close=lambda: (
                    None
                    if progress.completed
                    else usage.aborted(model.name, call.task, prompt_tokens, progress.sent_tokens)
                ),
            )
        delay = (model.ttft_s + generation.completion_tokens / model.tokens_per_s) * latency_scale
        if delay > 0 and await _client_left(request, delay):
            usage.aborted(model.name, call.task, prompt_tokens, 0)
            return Response(status_code=499)
        done()
        return _completion(call, generation)

    return app


def _completion(call: _Call, generation: _Generation) -> JSONResponse:
    return JSONResponse(
        {
            "id": call.id,
            "object": "chat.completion",
            "created": call.created,
            "model": call.model.name,
            "choices": [
                {"index": 0, "message": generation.message, "logprobs": None, "finish_reason": generation.finish_reason}
            ],
            "usage": _usage(call, generation),
        }
    )


async def _stream(
    call: _Call,
    generation: _Generation,
    latency_scale: float,
    progress: _StreamProgress,
    on_complete: Callable[[], None],
) -> AsyncGenerator[str, None]:
    """SSE events at the model's pace: role after TTFT, then deltas, then finish, usage and [DONE]."""
    model = call.model
    if model.ttft_s * latency_scale > 0:
        await asyncio.sleep(model.ttft_s * latency_scale)
    yield _event(call, {"role": "assistant", "content": ""})
    for delta, n_tokens in generation.deltas:
        if latency_scale > 0:
            await asyncio.sleep(n_tokens / model.tokens_per_s * latency_scale)
        yield _event(call, delta)
        progress.sent_tokens += n_tokens  # counted once the chunk is handed to the transport
    # Tally before the last write: a client that reads [DONE] and asks /sim/usage at once must
    # already find this request there.
    on_complete()
    progress.completed = True
    yield (
        _event(call, {}, generation.finish_reason)
        + _sse(
            {
                "id": call.id,
                "object": "chat.completion.chunk",
                "created": call.created,
                "model": model.name,
                "choices": [],
                "usage": _usage(call, generation),
            }
        )
        + "data: [DONE]\n\n"
    )


def _unusable_prefix(chat: ChatRequest) -> str | None:
    """Why the request's last message cannot be continued (vLLM's rules), or None."""
    if chat.add_generation_prompt:
        return "continue_final_message: cannot be true together with add_generation_prompt"
    last = chat.messages[-1]
    if last.role != "assistant" or not isinstance(last.content, str):
        return "continue_final_message: the last message must be the assistant's, with text content"
    return None


def _continuation(answer: Reply, prefix: str) -> str:
    """The rest of the answer after `prefix`, the start of it an interrupted generation wrote.

    Replies are deterministic, so the prefix is the start of this very answer; a prefix that
    is not (written by another model) is followed by the whole answer, as a model would go
    on after text it did not expect.
    """
    text = answer.content if answer.content is not None else "\n".join(_as_text(c) for c in answer.tool_calls)
    return text[len(prefix) :] if text.startswith(prefix) else text


def _json_schema(response_format: dict[str, Any] | None) -> dict[str, Any] | None:
    """The schema of a `{"type": "json_schema", "json_schema": {"schema": ...}}` response format, if that is one."""
    if not response_format or response_format.get("type") != "json_schema":
        return None
    schema = (response_format.get("json_schema") or {}).get("schema")
    return schema if isinstance(schema, dict) else None


def _schema_asked_for(messages: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The schema a repair step's message asks the answer in: the simulated model follows that instruction, as an
    instruction-tuned model mostly does, on routes that take no response format."""
    last = messages[-1] if messages else {}
    content = last.get("content") if last.get("role") == "user" else None
    if not isinstance(content, str) or REPAIR_SCHEMA_MARK not in content:
        return None
    try:
        schema = json.loads(content.split(REPAIR_SCHEMA_MARK, 1)[1])
    except ValueError:
        return None
    return schema if isinstance(schema, dict) else None


def _stops(stop: str | list[str] | None) -> tuple[str, ...]:
    return (stop,) if isinstance(stop, str) else tuple(s for s in stop or () if s)


def _render(answer: Reply, max_tokens: int, stops: tuple[str, ...] = ()) -> _Generation:
    """Cut the reply to max_tokens; a tool call that does not fit becomes truncated text, as a real model's would.
    Text ends before the first of `stops` it holds (a tool call is not cut), as OpenAI's API ends it."""
    calls = list(answer.tool_calls)
    call_tokens = sum(len(tokens.encode(c.name)) + len(tokens.encode(c.arguments)) for c in calls)
    if calls and call_tokens <= max_tokens:
        deltas: list[tuple[dict[str, Any], int]] = []
        for index, c in enumerate(calls):
            head = {"index": index, "id": c.id, "type": "function", "function": {"name": c.name, "arguments": ""}}
            deltas.append(({"tool_calls": [head]}, len(tokens.encode(c.name))))
            deltas.extend(
                ({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}, n)
                for piece, n in _pieces(tokens.encode(c.arguments))
            )
        message = {"role": "assistant", "content": None, "tool_calls": [_openai_call(c) for c in calls]}
        return _Generation(deltas, message, "tool_calls", call_tokens)
    text = (answer.content if not calls else "\n".join(_as_text(c) for c in calls)) or ""
    if hits := [i for i in (text.find(s) for s in stops) if i >= 0]:
        text = text[: min(hits)]
    ids = tokens.encode(text)
    finish = "length" if len(ids) > max_tokens else "stop"
    pieces = _pieces(ids[:max_tokens])
    content = "".join(piece for piece, _ in pieces)
    return _Generation(
        [({"content": p}, n) for p, n in pieces],
        {"role": "assistant", "content": content},
        finish,
        min(len(ids), max_tokens),
    )


def _pieces(ids: list[int]) -> list[tuple[str, int]]:
    """Token ids as text pieces of about CHUNK_TOKENS tokens each.

    A piece grows until it decodes to whole characters and re-encodes to exactly its own
    tokens, so whoever counts the streamed text piece by piece (Berth's heartbeats do)
    arrives at the same total as the usage the engine reports.
    """
    out: list[tuple[str, int]] = []
    start = 0
    while start < len(ids):
        end = min(start + CHUNK_TOKENS, len(ids))
        text = tokens.decode(ids[start:end])
        while end < len(ids) and (text.endswith("\ufffd") or len(tokens.encode(text)) != end - start):
            end += 1
            text = tokens.decode(ids[start:end])
        out.append((text, end - start))
        start = end
    return out


def _tools_for(tool_choice: Any, tool_defs: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    """The tools the policy may call: none for "none", only the named one for a forced choice."""
    if not tool_defs or tool_choice == "none":
        return None
    if isinstance(tool_choice, dict):
        forced = tool_choice.get("function")
        name = forced.get("name") if isinstance(forced, dict) else None
        return [t for t in tool_defs if t["function"]["name"] == name] or None
    return tool_defs


def _as_chosen(answer: Reply, chat: ChatRequest, tool_defs: list[dict[str, Any]] | None) -> Reply:
    """The reply as the call's tool_choice allows it, as a served model's constrained decoding would make it: a
    forced choice ("required", or a named function) calls a tool even where the policy would answer, with
    arguments built from that answer to the tool's schema; `parallel_tool_calls: false` keeps the first call."""
    if answer.tool_calls:
        return answer if chat.parallel_tool_calls is not False else Reply(tool_calls=answer.tool_calls[:1])
    forced = chat.tool_choice == "required" or isinstance(chat.tool_choice, dict)
    allowed = _tools_for(chat.tool_choice, tool_defs) if forced else None
    if not allowed:
        return answer
    function = allowed[0]["function"]
    arguments = json.dumps(instance(function.get("parameters") or {"type": "object"}, answer.content or ""))
    digest = uuid.uuid5(uuid.NAMESPACE_OID, f"{function['name']}|{arguments}").hex[:24]
    return Reply(tool_calls=(PlannedCall(id=f"call_{digest}", name=function["name"], arguments=arguments),))


async def _client_left(request: Request, seconds: float) -> bool:
    """Wait `seconds`; True if the client hung up meanwhile (its request is then aborted)."""

    async def disconnected() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    watcher = asyncio.ensure_future(disconnected())
    try:
        done, _ = await asyncio.wait({watcher}, timeout=seconds)
        return bool(done)
    finally:
        watcher.cancel()


def _usage(call: _Call, generation: _Generation) -> dict[str, int]:
    return {
        "prompt_tokens": call.prompt_tokens,
        "completion_tokens": generation.completion_tokens,
        "total_tokens": call.prompt_tokens + generation.completion_tokens,
    }


def _event(call: _Call, delta: dict[str, Any], finish_reason: str | None = None) -> str:
    return _sse(
        {
            "id": call.id,
            "object": "chat.completion.chunk",
            "created": call.created,
            "model": call.model.name,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
        }
    )


def _sse(payload: dict[str, Any]) -> str:
    return f"data: {json.dumps(payload, ensure_ascii=False, separators=(',', ':'))}\n\n"


def _openai_call(call: PlannedCall) -> dict[str, Any]:
    return {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}


def _as_text(call: PlannedCall) -> str:
    """How a Hermes-style model writes a tool call before the server parses it."""
    return f'<tool_call>\n{{"name": "{call.name}", "arguments": {call.arguments}}}\n</tool_call>'


def _describe_invalid(exc: ValueError) -> tuple[str, str, str]:
    """(message naming the field, error type, the field) for a body that cannot be read."""
    if isinstance(exc, ValidationError):
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "body"
        return f"{where}: {first['msg']}", "BadRequestError", where
    return f"body: not valid JSON ({exc})", "BadRequestError", "body"


def _error(status: int, message: str, kind: str, param: str | None = None) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind, "param": param, "code": status}}, status)
