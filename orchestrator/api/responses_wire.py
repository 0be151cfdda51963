"""OpenAI's Responses API wire format, as far as a task's own loop speaks it to Berth.

The Agents SDK's default model (`OpenAIResponsesModel`) and `client.responses.create` speak it. Berth serves
it by turning each request into the Chat Completions call it means (`ChatRequest`: the same task conversation,
the same step, the same books); `responses_reply.py` turns each reply into a `response` object, or its events.
Input items map to chat messages one to one, except that a reply's text and the function calls it made are one assistant
message, as the task holds them. What only OpenAI's servers keep (a stored response to continue from, hosted
tools, background runs) is refused by name: a Berth task holds its conversation itself.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator

from sdk.wire.limits import MAX_INPUT_CHARS, MAX_MODEL_NAME_CHARS, MAX_MODEL_TOOLS, MAX_TOKENS_PER_STEP
from sdk.wire.own_loop import MAX_CALL_ID_CHARS

from .chat_wire import MAX_ARGUMENTS_CHARS, MAX_DESCRIPTION_CHARS, MAX_MESSAGES, MAX_TOOL_NAME_CHARS, ChatRequest
from .errors import field_of, invalid

# Fields only OpenAI's own service can act on, and why a task cannot.
_SERVER_STATE = {
    "previous_response_id": "a task keeps its conversation itself: send the whole input each call",
    "conversation": "a task is the conversation: send the whole input each call",
    "background": "a call runs as the task's step while the request waits (stream it to see it written)",
    "prompt": "stored prompts live on OpenAI's servers: send instructions and input",
}
_TEXT_PARTS = ("input_text", "output_text", "refusal")
_TEXT_ONLY = "Berth's models read text, so content is a string or parts of type input_text/output_text"


class _Open(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ContentPart(BaseModel):
    """A text part of a message item (`input_text`, `output_text`, `refusal`: `InputItem` refuses any other)."""

    model_config = ConfigDict(extra="allow")  # annotations, logprobs: what a reply's part carried back
    type: str
    text: str | None = Field(default=None, max_length=MAX_INPUT_CHARS)
    refusal: str | None = Field(default=None, max_length=MAX_INPUT_CHARS)


class InputItem(BaseModel):
    """One input item: a message (by `role`), a function call a reply made, or a function call's output."""

    model_config = ConfigDict(extra="allow")  # id, status: what a reply's item carried back
    type: Literal["message", "function_call", "function_call_output"] = "message"
    role: Literal["user", "system", "developer", "assistant"] | None = None
    content: str | list[ContentPart] | None = None
    call_id: str | None = Field(default=None, min_length=1, max_length=MAX_CALL_ID_CHARS)
    name: str | None = Field(default=None, max_length=MAX_TOOL_NAME_CHARS)
    arguments: str | None = Field(default=None, max_length=MAX_ARGUMENTS_CHARS)
    output: str | list[ContentPart] | None = None

    @field_validator("type", mode="before")
    @classmethod
    def _known(cls, kind: Any) -> Any:
        if kind not in (None, "message", "function_call", "function_call_output"):
            raise ValueError(
                f"items of type {kind!r} are not taken: messages, function_call and function_call_output are"
            )
        return kind

    @field_validator("content", "output", mode="before")
    @classmethod
    def _text_parts_only(cls, content: Any) -> Any:
        """A part of another kind is refused here, by its index (a union's error would name the string member)."""
        if isinstance(content, list):
            for index, part in enumerate(content):
                kind = part.get("type") if isinstance(part, dict) else None
                if kind not in _TEXT_PARTS:
                    raise ValueError(f"part {index} is of type {kind!r}: {_TEXT_ONLY}")
        return content

    def text(self) -> str | None:
        return _joined(self.content)

    def check(self) -> str | None:
        """What the item lacks for its type (None when whole)."""
        if self.type == "message" and self.role is None:
            return "a message item needs its role"
        if self.type == "function_call" and not (self.call_id and self.name):
            return "a function_call item needs its call_id and name"
        if self.type == "function_call_output" and (not self.call_id or self.output is None):
            return "a function_call_output item needs its call_id and output"
        return None


_ITEMS = TypeAdapter(list[InputItem])


class FunctionTool(_Open):
    type: str
    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str | None = Field(default=None, max_length=MAX_DESCRIPTION_CHARS)
    parameters: dict[str, Any] | None = None
    strict: bool | None = None

    @field_validator("type")
    @classmethod
    def _function(cls, kind: str) -> str:
        if kind != "function":
            raise ValueError(f"{kind!r} is a tool OpenAI's servers run; a task's model takes function tools")
        return kind


class TextFormat(_Open):
    type: Literal["text", "json_object", "json_schema"]
    name: str | None = Field(default=None, max_length=MAX_TOOL_NAME_CHARS)
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    description: str | None = Field(default=None, max_length=MAX_DESCRIPTION_CHARS)
    strict: bool | None = None


class TextConfig(_Open):
    format: TextFormat | None = None
    verbosity: Literal["low", "medium", "high"] | None = None  # accepted and ignored, as on the chat route


class ResponsesRequest(_Open):
    """A Responses API request to a task's model."""

    model: str | None = Field(default=None, max_length=MAX_MODEL_NAME_CHARS)
    input: str | list[dict[str, Any]] = Field(
        description="the whole conversation so far, as input items (a string: one user message)"
    )
    instructions: str | None = Field(default=None, max_length=MAX_INPUT_CHARS)
    tools: list[FunctionTool] | None = Field(default=None, max_length=MAX_MODEL_TOOLS)
    tool_choice: Any = None
    parallel_tool_calls: bool | None = None
    temperature: float | None = None
    top_p: float | None = None
    max_output_tokens: int | None = Field(default=None, ge=1, le=MAX_TOKENS_PER_STEP)
    text: TextConfig | None = None
    stream: bool | None = None
    include: list[str] | None = Field(default=None, max_length=0, description="nothing extra is returned")
    top_logprobs: Literal[0] | None = Field(default=None, description="not returned: only 0 is accepted")
    # Refused with their reason (a validator): they steer what only OpenAI's servers keep.
    previous_response_id: str | None = None
    conversation: Any = None
    background: bool | None = None
    prompt: Any = None
    # Accepted and ignored, as on the chat route.
    reasoning: dict[str, Any] | None = None
    truncation: Literal["auto", "disabled"] | None = None
    store: bool | None = None
    metadata: dict[str, str] | None = Field(default=None, max_length=16)
    user: str | None = Field(default=None, max_length=256)
    service_tier: str | None = Field(default=None, max_length=32)
    prompt_cache_key: str | None = Field(default=None, max_length=256)
    prompt_cache_retention: str | None = Field(default=None, max_length=32)
    safety_identifier: str | None = Field(default=None, max_length=256)
    stream_options: dict[str, Any] | None = None

    @field_validator("input")
    @classmethod
    def _bounded_input(cls, value: str | list[dict[str, Any]]) -> str | list[dict[str, Any]]:
        if isinstance(value, str):
            if not value or len(value) > MAX_INPUT_CHARS:
                raise ValueError(f"a string input has 1 to {MAX_INPUT_CHARS} characters")
        elif not 1 <= len(value) <= MAX_MESSAGES:
            raise ValueError(f"1 to {MAX_MESSAGES} items")
        return value

    @field_validator("previous_response_id", "conversation", "background", "prompt")
    @classmethod
    def _server_state(cls, value: Any, info: Any) -> Any:
        if value not in (None, False):
            raise ValueError(f"not taken: {_SERVER_STATE[info.field_name]}")
        return value

    @field_validator("tool_choice", mode="before")
    @classmethod
    def _tool_choice(cls, choice: Any) -> Any:
        if choice is None or choice in ("none", "auto", "required"):
            return choice
        if isinstance(choice, dict) and choice.get("type") == "function" and isinstance(choice.get("name"), str):
            if set(choice) <= {"type", "name"}:
                return choice
        raise ValueError("'none', 'auto', 'required' or {\"type\": \"function\", \"name\": <a tool's name>}")

    def items(self) -> list[InputItem]:
        """The input as items, each checked: ApiError naming `input.N…` for the first that is not one."""
        if isinstance(self.input, str):
            return [InputItem(role="user", content=self.input)]
        try:
            items = _ITEMS.validate_python(self.input)
        except ValidationError as exc:
            first = exc.errors()[0]
            raise invalid(f"input.{field_of(first['loc'])}", first["msg"]) from None
        for index, item in enumerate(items):
            if (problem := item.check()) is not None:
                raise invalid(f"input.{index}", problem)
        return items

    def as_chat(self) -> ChatRequest:
        """The Chat Completions call this request means; ApiError naming this wire's field when it is not one."""
        try:
            return ChatRequest.model_validate(self._chat_body())
        except ValidationError as exc:
            first = exc.errors()[0]
            raise invalid(chat_field(field_of(first["loc"]) or "input"), first["msg"]) from None

    def _chat_body(self) -> dict[str, Any]:
        choice = self.tool_choice
        if isinstance(choice, dict):
            choice = {"type": "function", "function": {"name": choice["name"]}}
        body: dict[str, Any] = {
            "model": self.model,
            "messages": _messages(self.instructions, self.items()),
            "tools": [
                {"type": "function", "function": t.model_dump(exclude={"type"}, exclude_none=True)}
                for t in self.tools or ()
            ]
            or None,
            "tool_choice": choice,
            "parallel_tool_calls": self.parallel_tool_calls,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "max_completion_tokens": self.max_output_tokens,
            "response_format": _response_format(self.text),
        }
        return {k: v for k, v in body.items() if v is not None}


def chat_field(field: str) -> str:
    """A chat field's name as this wire calls it (an error found on the chat call names the request's field)."""
    head = field.split(".", 1)[0]
    return {"messages": "input", "max_completion_tokens": "max_output_tokens", "response_format": "text"}.get(
        head, field
    )


def _joined(content: str | list[ContentPart] | None) -> str | None:
    if content is None or isinstance(content, str):
        return content
    return "".join(part.text or part.refusal or "" for part in content)


def _messages(instructions: str | None, items: list[InputItem]) -> list[dict[str, Any]]:
    """Chat messages, in order; a reply's function calls join the assistant message just before them (its text),
    or make one of their own, so the conversation reads as the task holds it."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": instructions}] if instructions else []
    for item in items:
        if item.type == "function_call":
            call = {
                "id": item.call_id,
                "type": "function",
                "function": {"name": item.name, "arguments": item.arguments or "{}"},
            }
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant" and last.get("_from_reply"):
                last.setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call], "_from_reply": True})
        elif item.type == "function_call_output":
            messages.append({"role": "tool", "tool_call_id": item.call_id, "content": _joined(item.output)})
        else:
            role = "system" if item.role == "developer" else item.role
            messages.append({"role": role, "content": item.text(), "_from_reply": role == "assistant"})
    for message in messages:
        message.pop("_from_reply", None)
    return messages


def _response_format(text: TextConfig | None) -> dict[str, Any] | None:
    if text is None or text.format is None or text.format.type == "text":
        return None
    if text.format.type == "json_object":
        return {"type": "json_object"}
    schema: dict[str, Any] = {"name": text.format.name or "output", "schema": text.format.schema_ or {}}
    if text.format.strict is not None:
        schema["strict"] = text.format.strict
    return {"type": "json_schema", "json_schema": schema}
