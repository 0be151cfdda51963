"""OpenAI's Chat Completions wire format, as far as a task's own loop speaks it to Berth.

An author's loop (the OpenAI Agents SDK, LangChain's ChatOpenAI, a plain `openai` client) reaches a task's
model through this one format. Every field it may send is named here: what Berth honours, what it accepts and
ignores (with why), and anything else is refused with its name, as a typo in Berth's own API would be.
"""

from __future__ import annotations

import time
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from sdk import Message, ModelSettings, ToolCall
from sdk.wire.limits import MAX_INPUT_CHARS, MAX_MODEL_NAME_CHARS, MAX_MODEL_TOOLS, MAX_TOKENS_PER_STEP
from sdk.wire.own_loop import MAX_CALL_ID_CHARS, LoopReply

MAX_MESSAGES = 4096
MAX_TOOL_NAME_CHARS = 64
MAX_DESCRIPTION_CHARS = 8192
MAX_ARGUMENTS_CHARS = 64_000


class _Open(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TextPart(_Open):
    type: Literal["text"]
    text: str = Field(max_length=MAX_INPUT_CHARS)


class CalledFunction(_Open):
    name: str = Field(min_length=1, max_length=MAX_TOOL_NAME_CHARS)
    arguments: str = Field(default="{}", max_length=MAX_ARGUMENTS_CHARS)


class WireToolCall(_Open):
    id: str = Field(min_length=1, max_length=MAX_CALL_ID_CHARS)
    type: Literal["function"] = "function"
    function: CalledFunction


# Content parts a model that reads text cannot take: refused by name rather than by a union's mismatch.
_UNREADABLE_PARTS = {
    "image_url": "an image",
    "input_audio": "audio",
    "file": "a file",
    "image": "an image",
}


class WireMessage(_Open):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None
    name: str | None = Field(default=None, max_length=MAX_TOOL_NAME_CHARS)
    tool_calls: list[WireToolCall] | None = Field(default=None, max_length=MAX_MODEL_TOOLS)
    tool_call_id: str | None = Field(default=None, max_length=MAX_CALL_ID_CHARS)
    refusal: str | None = Field(default=None, max_length=MAX_INPUT_CHARS, description="accepted, not sent to the model")

    @field_validator("content", mode="before")
    @classmethod
    def _text_parts_only(cls, content: Any) -> Any:
        if isinstance(content, list):
            for index, part in enumerate(content):
                kind = part.get("type") if isinstance(part, dict) else None
                if kind != "text":
                    what = _UNREADABLE_PARTS.get(str(kind), f"a part of type {kind!r}")
                    raise ValueError(
                        f"part {index} is {what}: Berth's models read text, so a message's content is a string"
                        " or a list of parts of type 'text'"
                    )
        return content

    @field_validator("content")
    @classmethod
    def _bounded(cls, content: str | list[TextPart] | None) -> str | list[TextPart] | None:
        if isinstance(content, str) and len(content) > MAX_INPUT_CHARS:
            raise ValueError(f"at most {MAX_INPUT_CHARS} characters")
        return content

    def text(self) -> str | None:
        if isinstance(self.content, list):
            return "".join(part.text for part in self.content)
        return self.content

    def to_message(self) -> Message:
        role = "system" if self.role == "developer" else self.role
        calls = [ToolCall(id=c.id, name=c.function.name, arguments=c.function.arguments) for c in self.tool_calls or ()]
        return Message(
            role=role,
            content=self.text(),
            tool_calls=calls or None,
            tool_call_id=self.tool_call_id,
            name=self.name if role == "tool" else None,
        )


class FunctionSpec(_Open):
    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str | None = Field(default=None, max_length=MAX_DESCRIPTION_CHARS)
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class WireTool(_Open):
    type: Literal["function"]
    function: FunctionSpec


class ForcedFunction(_Open):
    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")


class NamedToolChoice(_Open):
    """`{"type": "function", "function": {"name": ...}}`: the model must call that one tool."""

    type: Literal["function"]
    function: ForcedFunction


class ResponseFormat(_Open):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: dict[str, Any] | None = None


class StreamOptions(_Open):
    include_usage: bool | None = None


class ChatRequest(_Open):
    """A Chat Completions request to a task's model."""

    model: str | None = Field(default=None, max_length=MAX_MODEL_NAME_CHARS)
    messages: list[WireMessage] = Field(min_length=1, max_length=MAX_MESSAGES)
    tools: list[WireTool] | None = Field(default=None, max_length=MAX_MODEL_TOOLS)
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = Field(default=None, description="false: at most one tool call a reply")
    temperature: float | None = None
    top_p: float | None = None
    stop: str | list[str] | None = None
    seed: int | None = None
    max_tokens: int | None = Field(default=None, ge=1, le=MAX_TOKENS_PER_STEP)
    max_completion_tokens: int | None = Field(default=None, ge=1, le=MAX_TOKENS_PER_STEP)
    response_format: ResponseFormat | None = None
    n: Literal[1] | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    # Only their neutral values: Berth's routes do not apply them, and a call must not believe they did.
    frequency_penalty: Literal[0] | None = Field(default=None, description="not applied: only 0 is accepted")
    presence_penalty: Literal[0] | None = Field(default=None, description="not applied: only 0 is accepted")
    logprobs: Literal[False] | None = Field(default=None, description="not returned: only false is accepted")
    # Accepted and ignored: they steer OpenAI's own service, or hint at what only reasoning models do, not
    # what a Berth model writes (the Agents SDK sends reasoning_effort and verbosity with every call).
    reasoning_effort: Literal["none", "minimal", "low", "medium", "high", "xhigh"] | None = None
    verbosity: Literal["low", "medium", "high"] | None = None
    store: bool | None = None
    metadata: dict[str, str] | None = Field(default=None, max_length=16)
    user: str | None = Field(default=None, max_length=256)
    service_tier: str | None = Field(default=None, max_length=32)
    prompt_cache_key: str | None = Field(default=None, max_length=256)
    safety_identifier: str | None = Field(default=None, max_length=256)

    @field_validator("tool_choice", mode="before")
    @classmethod
    def _one_tool_choice(cls, choice: Any) -> Any:
        """One message for any wrong form, naming the forms that are taken (a union's errors name its members)."""
        if choice is None or choice in ("none", "auto", "required"):
            return choice
        if isinstance(choice, dict):
            try:
                return NamedToolChoice.model_validate(choice)
            except ValidationError:
                pass
        raise ValueError(
            '\'none\', \'auto\', \'required\' or {"type": "function", "function": {"name": <a tool\'s name>}}'
        )

    def split(self) -> tuple[str | None, list[Message]]:
        """The leading system (developer) messages as the call's instructions, and the conversation after them:
        an agent handing off changes its instructions, not the conversation the task holds."""
        messages = [m.to_message() for m in self.messages]
        head = 0
        while head < len(messages) and messages[head].role == "system":
            head += 1
        instructions = "\n\n".join(m.content or "" for m in messages[:head]) or None
        return instructions, messages[head:]

    def settings(self) -> dict[str, Any]:
        """How to sample, checked as an agent's ModelSettings are (raises ValidationError naming the field). The
        defaults (`tool_choice` auto, parallel tool calls allowed, text) are left out: a call that names them is
        the same call as one that does not."""
        chosen = ModelSettings(temperature=self.temperature, top_p=self.top_p, stop=self.stop, seed=self.seed).chosen()
        if self.response_format is not None and self.response_format.type != "text":
            chosen["response_format"] = self.response_format.model_dump(exclude_none=True)
        if self.tool_choice is not None and self.tool_choice != "auto":
            chosen["tool_choice"] = (
                self.tool_choice if isinstance(self.tool_choice, str) else self.tool_choice.model_dump()
            )
        if self.parallel_tool_calls is False:
            chosen["parallel_tool_calls"] = False
        return chosen

    @property
    def forces_a_tool_call(self) -> bool:
        return self.tool_choice == "required" or isinstance(self.tool_choice, NamedToolChoice)

    def tool_choice_problem(self) -> str | None:
        """Why the call's tool_choice cannot be served with the tools it offers (None when it can)."""
        offered = [t.function.name for t in self.tools or ()]
        if self.tool_choice == "required" and not offered:
            return "'required' makes the model call a tool, but the call offers none (send tools, or 'auto')"
        if isinstance(self.tool_choice, NamedToolChoice) and self.tool_choice.function.name not in offered:
            name = self.tool_choice.function.name
            return f"it names {name!r}, which is not among the call's tools ({', '.join(offered) or 'none'})"
        return None

    def tool_schemas(self) -> list[dict[str, Any]]:
        return [t.model_dump(exclude_none=True) for t in self.tools or ()]

    def answer_limit(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens


def _finish_reason(reply: LoopReply) -> str:
    if reply.answer.tool_calls:
        return "tool_calls"
    return reply.finish_reason if reply.finish_reason in ("stop", "length", "content_filter") else "stop"


def _wire_message(reply: LoopReply) -> dict[str, Any]:
    out: dict[str, Any] = {"role": "assistant", "content": reply.answer.content}
    if reply.answer.tool_calls:
        out["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in reply.answer.tool_calls
        ]
    return out


def _usage(reply: LoopReply) -> dict[str, int]:
    """What this call spent: a replayed call spent nothing (its tokens were booked when it was first made)."""
    prompt, completion = (0, 0) if reply.replayed else (reply.prompt_tokens, reply.completion_tokens)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _berth(task_id: str, reply: LoopReply) -> dict[str, Any]:
    return {"task_id": task_id, "step": reply.step, "replayed": reply.replayed, "served_by": reply.served_by}


def completion(task_id: str, model: str, reply: LoopReply) -> dict[str, Any]:
    """The reply as a `chat.completion` object, with Berth's own facts under `berth`."""
    return {
        "id": f"chatcmpl-{task_id}-{reply.step}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {"index": 0, "message": _wire_message(reply), "finish_reason": _finish_reason(reply), "logprobs": None}
        ],
        "usage": _usage(reply),
        "berth": _berth(task_id, reply),
    }


def _chunk(task_id: str, model: str, step: int, choices: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-{task_id}-{step}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": choices,
    }


def text_chunk(task_id: str, model: str, step: int, text: str, first: bool = False) -> dict[str, Any]:
    """A piece of the reply's text as the engine wrote it (the first piece also names the role)."""
    delta: dict[str, Any] = {"role": "assistant", "content": text} if first else {"content": text}
    return _chunk(task_id, model, step, [{"index": 0, "delta": delta, "finish_reason": None}])


def closing_chunks(
    task_id: str, model: str, reply: LoopReply, include_usage: bool, opened: bool
) -> list[dict[str, Any]]:
    """After the text's pieces: the reply's tool calls (arguments whole), the finish with Berth's facts, and the
    usage when asked for. `opened`: a text piece already named the role."""
    chunks = []
    role = {} if opened else {"role": "assistant"}
    if reply.answer.tool_calls:
        calls = [{"index": i, **call} for i, call in enumerate(_wire_message(reply)["tool_calls"])]
        chunks.append(
            _chunk(
                task_id,
                model,
                reply.step,
                [{"index": 0, "delta": {**role, "tool_calls": calls}, "finish_reason": None}],
            )
        )
    elif not opened:
        chunks.append(text_chunk(task_id, model, reply.step, "", first=True))
    finish = _chunk(task_id, model, reply.step, [{"index": 0, "delta": {}, "finish_reason": _finish_reason(reply)}])
    chunks.append({**finish, "berth": _berth(task_id, reply)})
    if include_usage:
        chunks.append({**_chunk(task_id, model, reply.step, []), "usage": _usage(reply)})
    return chunks
