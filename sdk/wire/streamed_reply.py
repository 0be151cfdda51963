"""A streamed reply, piece by piece and put together: the assistant message, why it stopped, and the engine's usage.

The deltas are engine-neutral: the step's stream client (activities/step/model_stream.py) reads Berth's own
engines and hosted providers alike into them. The reply is built from them here rather than with litellm's chunk
builder, which recounts tokens with a tokenizer it may try to download for self-hosted model names; the ledger
books the engine's own usage instead. Plain data and rules, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .._messages import Message, ToolCall


@dataclass(frozen=True)
class ToolCallDelta:
    """A piece of a streamed tool call: the first piece of call `index` names it, later ones add arguments."""

    index: int
    id: str | None
    name: str | None
    arguments: str | None


@dataclass(frozen=True)
class StreamDelta:
    """One streamed chunk of a reply. `usage` (prompt_tokens, completion_tokens) is set only on the chunk that
    carries the request's usage, the last one."""

    response_id: str | None
    text: str
    tool_calls: tuple[ToolCallDelta, ...]
    finish_reason: str | None
    usage: tuple[int, int] | None


@dataclass
class _ToolCallSlot:
    id: str = ""
    name: str = ""
    arguments: str = ""


@dataclass
class ReplyAssembly:
    """The deltas of one reply so far, after the `prefix` it continues (a cut generation's text)."""

    prefix: str = ""
    text: list[str] = field(default_factory=list)
    calls: dict[int, _ToolCallSlot] = field(default_factory=dict)
    finish_reason: str | None = None
    usage: tuple[int, int] | None = None  # (prompt, completion) as the engine counted them

    def add(self, delta: StreamDelta) -> None:
        if delta.usage is not None:
            self.usage = delta.usage
        self.finish_reason = delta.finish_reason or self.finish_reason
        if delta.text:
            self.text.append(delta.text)
        for call in delta.tool_calls:
            slot = self.calls.setdefault(call.index, _ToolCallSlot())
            slot.id = call.id or slot.id
            slot.name += call.name or ""
            slot.arguments += call.arguments or ""

    def message(self) -> Message:
        tool_calls = [
            ToolCall(id=c.id, name=c.name, arguments=c.arguments or "{}") for _, c in sorted(self.calls.items())
        ]
        return Message(
            role="assistant", content=self.prefix + "".join(self.text) or None, tool_calls=tool_calls or None
        )


def delta_text(delta: StreamDelta) -> tuple[str, bool]:
    """The text one delta adds, for heartbeat progress (tool-call names and arguments count too), and whether it
    is plain text: a reply that turns into tool calls cannot be continued by another engine."""
    text = delta.text
    for call in delta.tool_calls:
        text += (call.name or "") + (call.arguments or "")
    return text, not delta.tool_calls
