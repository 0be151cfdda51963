"""The llama.cpp engine behind Berth's OpenAI-compatible face: one GGUF model, its chat template, its tool calls.

The HTTP side (the request's fields and refusals, SSE, usage, the usage journal, `Idempotency-Key` replay,
stopping when the client leaves) is the one every Berth-served engine shares (`openai_face.py`), so a node
reaches this engine through litellm's `hosted_vllm/` route as it reaches vLLM. This module reads the prompt
through the model's own chat template, counts it in the model's tokens, and turns the model's text into OpenAI
deltas: text, or whole tool calls where the template has tool syntax. llama-cpp-python's own server
(`llama_cpp.server`) is not used: docs/engines.md says what Berth needs that it lacks.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, Literal

from fastapi import FastAPI
from pydantic import Field

from ..chat_engine import ChatRequest, ChatTool, Delta, Ending, Prompt, Refusal
from ..openai_face import ChatFace, TimingsLog
from ..usage import UsageTally
from .chat import ChatTemplateError, ParsedCall, ToolCallStream
from .model import Generation, LlamaModel, Sampling

MAX_STOP_STRINGS = 4  # OpenAI's limit


class LlamaChatRequest(ChatRequest):
    """What this engine reads besides every engine's fields."""

    tools: list[ChatTool] | None = None
    tool_choice: Literal["none", "auto"] | None = None  # forcing a call needs a grammar this engine does not build
    stop: str | list[str] | None = None
    n: int = Field(default=1, ge=1, le=1)  # one context, one sequence


@dataclass(frozen=True)
class _Rendered:
    ids: list[int]
    tools: list[dict[str, Any]] | None  # the tools written into the prompt: their calls are parsed back


class _ModelReply:
    """A generation on the model's thread, as OpenAI deltas: its pieces as text, or as whole tool calls when the
    prompt offered tools."""

    def __init__(self, generation: Generation, parser: ToolCallStream | None) -> None:
        self._generation = generation
        self._parser = parser
        self._calls = 0

    async def prefilled(self) -> None:
        return None  # the opening chunk goes at once, even to a request still waiting for the model's thread

    async def deltas(self) -> AsyncIterator[Delta]:
        while (piece := await self._generation.pieces.get()) is not None:
            for part in self._parser.feed(piece.text) if self._parser is not None else [piece.text]:
                if delta := self._delta(part):
                    yield delta
        for part in self._parser.finish() if self._parser is not None else []:
            if delta := self._delta(part):
                yield delta

    async def whole(self) -> list[Delta]:
        return [delta async for delta in self.deltas()]

    async def ending(self) -> Ending:
        outcome = await self._generation.outcome
        finish = "tool_calls" if self._calls and outcome.finish_reason == "stop" else outcome.finish_reason
        return Ending(finish, outcome.completion_tokens)

    def abandon(self, sent_tokens: int, record: Callable[[int], None]) -> None:
        # Stop the generation, and book what it had generated once the model's thread has let go.
        self._generation.cancel()
        self._generation.outcome.add_done_callback(
            lambda f: record(f.result().completion_tokens if not f.cancelled() and f.exception() is None else 0)
        )

    def _delta(self, part: str | ParsedCall) -> Delta | None:
        if isinstance(part, str):
            return Delta({"content": part}) if part else None
        call = {
            "index": self._calls,
            "id": f"call_{uuid.uuid4().hex[:24]}",
            "type": "function",
            "function": {"name": part.name, "arguments": part.arguments},
        }
        self._calls += 1
        return Delta({"tool_calls": [call]})


class LlamaEngine:
    """The face's engine over one loaded model, served as `served_name`."""

    request_type = LlamaChatRequest
    usage_unasked = False  # the usage chunk comes with `stream_options.include_usage`, as vLLM sends it

    def __init__(self, model: LlamaModel, served_name: str, default_temperature: float) -> None:
        self.model = model
        self.served_name = served_name
        self.default_temperature = default_temperature

    def context_window(self, model: str) -> int:
        if model != self.served_name:
            raise Refusal(
                f"The model `{model}` does not exist; this replica serves `{self.served_name}`.",
                "model",
                status=404,
                kind="NotFoundError",
            )
        return self.model.n_ctx

    async def read_prompt(self, chat: LlamaChatRequest, body: dict[str, Any], body_bytes: int) -> Prompt[_Rendered]:
        if len(_stops(chat)) > MAX_STOP_STRINGS:
            raise Refusal(f"stop: at most {MAX_STOP_STRINGS} stop strings, got {len(_stops(chat))}", "stop")
        tools = body.get("tools") if chat.tools and chat.tool_choice != "none" else None
        try:
            prompt = self.model.template.render(body["messages"], tools, chat.continue_final_message)
        except ChatTemplateError as exc:
            raise Refusal(str(exc), exc.field) from exc
        ids = await asyncio.to_thread(self.model.tokenize, prompt.text)
        return Prompt(len(ids), _Rendered(ids, tools))

    def generate(self, chat: LlamaChatRequest, prompt: Prompt[_Rendered], max_tokens: int) -> _ModelReply:
        sampling = Sampling(
            max_tokens=max_tokens,
            stop=_stops(chat),
            temperature=self.default_temperature if chat.temperature is None else chat.temperature,
            top_p=1.0 if chat.top_p is None else chat.top_p,
            seed=chat.seed,
        )
        parser = ToolCallStream() if prompt.read.tools else None
        return _ModelReply(self.model.start(prompt.read.ids, sampling), parser)


def _stops(chat: LlamaChatRequest) -> tuple[str, ...]:
    return (chat.stop,) if isinstance(chat.stop, str) else tuple(chat.stop or ())


def create_app(
    model: LlamaModel,
    served_name: str,
    tally: UsageTally | None = None,
    default_temperature: float = 1.0,
    timings: TimingsLog | None = None,
) -> FastAPI:
    """The server over an already loaded model: it is ready (lists the model) as soon as it listens."""
    usage = tally or UsageTally()
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

    ChatFace(LlamaEngine(model, served_name, default_temperature), usage, timings).mount(app)
    return app
