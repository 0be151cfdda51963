"""What an engine Berth serves itself gives the OpenAI face (`openai_face.py`): the one small interface behind
`POST /v1/chat/completions`, as httpx keeps one transport protocol and several transports.

An engine says which request fields it reads (`request_type`), how large a model's context is, how it reads and
counts a prompt, and how it generates: a `Generation` is a stream of OpenAI deltas at the model's pace, and how
it ended. Everything said to the client (refusals, SSE, the message, usage, the usage journal, replay, the client
leaving) is the face's.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, Generic, Literal, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, Field


class Refusal(Exception):
    """A request the engine will not serve, said as an OpenAI error that names the field."""

    def __init__(self, message: str, param: str | None, *, status: int = 400, kind: str = "BadRequestError") -> None:
        super().__init__(message)
        self.message, self.param, self.status, self.kind = message, param, status, kind


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None


class ToolFunction(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str = Field(min_length=1)


class ChatTool(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["function"] = "function"
    function: ToolFunction


class ChatRequest(BaseModel):
    """The fields of POST /v1/chat/completions every engine reads; any other is ignored, as vLLM does. An engine's
    `request_type` adds those it reads besides (`tools`, `tool_choice`, `stop`, each with the engine's own limits)."""

    model_config = ConfigDict(extra="ignore")
    model: str = Field(min_length=1)
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    seed: int | None = Field(default=None, ge=0, lt=2**32)
    continue_final_message: bool = False  # vLLM's: go on writing the last (assistant) message
    add_generation_prompt: bool = True


@dataclass(frozen=True)
class Delta:
    """One OpenAI chat delta (`{"content": …}` or `{"tool_calls": […]}`) and the completion tokens it carries
    (0 where the engine counts its tokens only at the end)."""

    fields: dict[str, Any]
    tokens: int = 0


@dataclass(frozen=True)
class Ending:
    finish_reason: str  # "stop", "length", "tool_calls"
    completion_tokens: int


class Generation(Protocol):
    """One reply being generated. The face reads it either streamed (`prefilled`, then `deltas`) or whole
    (`whole`), then its `ending`; or gives it up with `abandon` when the client leaves."""

    async def prefilled(self) -> None:
        """Return when the stream's opening (role) chunk may go."""

    def deltas(self) -> AsyncIterator[Delta]:
        """The reply's deltas at the model's pace, for a streamed reply."""
        ...

    async def whole(self) -> list[Delta]:
        """All the reply's deltas, once the model would have finished it, for a reply not streamed."""
        ...

    async def ending(self) -> Ending:
        """How the reply ended and its completion tokens (after `deltas` or `whole`)."""
        ...

    def abandon(self, sent_tokens: int, record: Callable[[int], None]) -> None:
        """The client left having been sent `sent_tokens`: stop, and `record` the completion tokens the
        usage journal books as aborted (now, or once the engine has stopped)."""


T = TypeVar("T")
RequestT = TypeVar("RequestT", bound=ChatRequest)


@dataclass(frozen=True)
class Prompt(Generic[T]):
    tokens: int  # what `usage.prompt_tokens` reports
    read: T  # the engine's own form of it (messages, token ids), handed back to `generate`


class ChatEngine(Protocol[RequestT, T]):
    """An engine Berth serves itself, as the face needs it."""

    @property
    def request_type(self) -> type[RequestT]: ...

    @property
    def usage_unasked(self) -> bool:
        """Whether a stream ends with the usage chunk even without `stream_options.include_usage`."""
        ...

    def context_window(self, model: str) -> int:
        """The model's context in tokens; `Refusal` (404) for a model this engine does not serve."""
        ...

    async def read_prompt(self, chat: RequestT, body: dict[str, Any], body_bytes: int) -> Prompt[T]:
        """The prompt, counted in the model's tokens; `Refusal` for one the engine cannot read."""
        ...

    def generate(self, chat: RequestT, prompt: Prompt[T], max_tokens: int) -> Generation:
        """Start generating the reply, of at most `max_tokens` tokens."""
        ...
