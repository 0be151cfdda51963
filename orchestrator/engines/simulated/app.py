"""The simulated engine: vLLM's behaviour on the slice of its OpenAI-compatible API that Berth uses.

Agents reach this server only through litellm's `hosted_vllm/` route, exactly as they
reach vLLM, so everything litellm relies on is real: SSE framing, streamed tool-call
deltas, the trailing usage chunk, OpenAI-style errors, and time spent waiting for the
first token and for each token after it (`asyncio.sleep`, so requests overlap freely).
The HTTP side is the one every Berth-served engine shares (`openai_face.py`); this module
is the model behind it. Prompt tokens are counted with `activities.step.tokens`, the counter
Berth reserves budget with, so a step's reservation and the engine's usage agree exactly.
Like vLLM, it continues a final assistant message given with `continue_final_message` (how
Berth resumes a generation a preemption cut off without paying for its tokens twice).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Literal

from fastapi import FastAPI
from pydantic import Field

from activities.step import tokens
from sdk.wire.output import REPAIR_SCHEMA_MARK

from ..chat_engine import ChatRequest, ChatTool, Delta, Ending, Prompt, Refusal, ToolFunction
from ..openai_face import ChatFace
from .models import DEFAULT_MODELS, SimulatedModel
from .policy import PlannedCall, Reply, reply
from .structured import instance
from .usage import UsageTally

CHUNK_TOKENS = 4  # tokens per streamed chunk: smooth enough for a UI, a quarter of the wake-ups
BIG_BODY_BYTES = 64_000  # above this, counting the prompt (~ms per 10 k tokens) moves off the event loop


class _Function(ToolFunction):
    parameters: dict[str, Any] | None = None


class _Tool(ChatTool):
    function: _Function


class SimulatedChatRequest(ChatRequest):
    """What the simulated engine reads besides every engine's fields (it accepts temperature, top_p and seed, but
    its replies are deterministic anyway)."""

    tools: list[_Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None  # false: at most one tool call a reply
    stop: str | list[str] | None = Field(default=None, max_length=4)  # applied: the text ends before the first
    response_format: dict[str, Any] | None = None  # a json_schema one is applied (structured.py)


@dataclass
class _Generation:
    """A reply cut to max_tokens and split into streamable deltas, each with its token count."""

    deltas: list[tuple[dict[str, Any], int]]
    finish_reason: str
    completion_tokens: int


@dataclass(frozen=True)
class _Conversation:
    """The request as the policy reads it: its raw messages and the tools offered."""

    messages: list[dict[str, Any]]
    tool_defs: list[dict[str, Any]] | None


class _PacedReply:
    """A reply decided at once and handed out at the model's pace: its TTFT, then tokens_per_s."""

    def __init__(self, model: SimulatedModel, generation: _Generation, latency_scale: float) -> None:
        self._model, self._generation, self._scale = model, generation, latency_scale

    async def prefilled(self) -> None:
        if self._model.ttft_s * self._scale > 0:
            await asyncio.sleep(self._model.ttft_s * self._scale)

    async def deltas(self) -> AsyncIterator[Delta]:
        for delta, n_tokens in self._generation.deltas:
            if self._scale > 0:
                await asyncio.sleep(n_tokens / self._model.tokens_per_s * self._scale)
            yield Delta(delta, n_tokens)

    async def whole(self) -> list[Delta]:
        delay = (self._model.ttft_s + self._generation.completion_tokens / self._model.tokens_per_s) * self._scale
        if delay > 0:
            await asyncio.sleep(delay)
        return [Delta(delta, n_tokens) for delta, n_tokens in self._generation.deltas]

    async def ending(self) -> Ending:
        return Ending(self._generation.finish_reason, self._generation.completion_tokens)

    def abandon(self, sent_tokens: int, record: Callable[[int], None]) -> None:
        record(sent_tokens)  # nothing runs on: the tokens the client was sent are what it cost


class SimulatedEngine:
    """The face's engine: deterministic replies from the policy (`policy.py`), at each model's pace."""

    request_type = SimulatedChatRequest
    usage_unasked = True  # every stream ends with the usage chunk, asked for or not

    def __init__(self, models: dict[str, SimulatedModel], latency_scale: float) -> None:
        self.models = models
        self.latency_scale = latency_scale

    def context_window(self, model: str) -> int:
        served = self.models.get(model)
        if served is None:
            raise Refusal(f"The model `{model}` does not exist.", "model", status=404, kind="NotFoundError")
        return served.context_window

    async def read_prompt(
        self, chat: SimulatedChatRequest, body: dict[str, Any], body_bytes: int
    ) -> Prompt[_Conversation]:
        last = chat.messages[-1]
        if chat.continue_final_message and (last.role != "assistant" or not isinstance(last.content, str)):
            raise Refusal(
                "continue_final_message: the last message must be the assistant's, with text content",
                "continue_final_message",
            )
        conversation = _Conversation(body["messages"], body.get("tools") or None)
        try:
            if body_bytes > BIG_BODY_BYTES:
                count = await asyncio.to_thread(
                    tokens.count_prompt_tokens, conversation.messages, conversation.tool_defs
                )
            else:
                count = tokens.count_prompt_tokens(conversation.messages, conversation.tool_defs)
        except Exception as exc:  # litellm's counter raises assorted types on shapes it cannot read
            raise Refusal(f"messages: cannot count the prompt's tokens ({exc})", "messages") from exc
        return Prompt(count, conversation)

    def generate(self, chat: SimulatedChatRequest, prompt: Prompt[_Conversation], max_tokens: int) -> _PacedReply:
        messages, tool_defs = prompt.read.messages, prompt.read.tool_defs
        model = self.models[chat.model]
        if chat.continue_final_message:
            answer = reply(model.name, messages[:-1], _tools_for(chat.tool_choice, tool_defs))
            prefix = str(messages[-1]["content"])
            generation = _render(Reply(content=_continuation(answer, prefix)), max_tokens, _stops(chat.stop))
        else:
            answer = _as_chosen(reply(model.name, messages, _tools_for(chat.tool_choice, tool_defs)), chat, tool_defs)
            schema = _json_schema(chat.response_format) or _schema_asked_for(messages)
            if schema is not None and not answer.tool_calls:
                answer = Reply(content=json.dumps(instance(schema, answer.content or "")))
            generation = _render(answer, max_tokens, _stops(chat.stop))
        return _PacedReply(model, generation, self.latency_scale)


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

    ChatFace(SimulatedEngine(served, latency_scale), usage).mount(app)
    return app


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
        return _Generation(deltas, "tool_calls", call_tokens)
    text = (answer.content if not calls else "\n".join(_as_text(c) for c in calls)) or ""
    if hits := [i for i in (text.find(s) for s in stops) if i >= 0]:
        text = text[: min(hits)]
    ids = tokens.encode(text)
    finish = "length" if len(ids) > max_tokens else "stop"
    pieces = _pieces(ids[:max_tokens])
    return _Generation([({"content": p}, n) for p, n in pieces], finish, min(len(ids), max_tokens))


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


def _as_chosen(answer: Reply, chat: SimulatedChatRequest, tool_defs: list[dict[str, Any]] | None) -> Reply:
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


def _as_text(call: PlannedCall) -> str:
    """How a Hermes-style model writes a tool call before the server parses it."""
    return f'<tool_call>\n{{"name": "{call.name}", "arguments": {call.arguments}}}\n</tool_call>'
