"""Wire types of a task whose agent loop is the author's own (an OpenAI Agents SDK run, a LangGraph graph).

Such a task is still one Berth workflow with one budget: each model call of the loop is a step the workflow
runs on the pool (reserved, placed, booked, checkpointed), each tool result it reports is kept so that a loop
re-run after a crash gets it back instead of running the tool again. The API sends these to the workflow.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, field_validator

from .._messages import Message
from .limits import MAX_INPUT_CHARS, MAX_MODEL_TOOLS, MAX_TOOL_RESULT_CHARS
from .loop_approvals import LoopApprovals
from .transcript import canonical_json, digest

LOOP_CALL_UPDATE = "loop_call"
LOOP_TOOL_RESULT_UPDATE = "loop_tool_result"
LOOP_FINISH_UPDATE = "loop_finish"
LOOP_TRANSCRIPT_QUERY = "loop_transcript"
LOOP_TOOL_RESULT_QUERY = "loop_tool_result"
LOOP_ASKED_QUERY = "loop_asked"

MAX_NEW_MESSAGES = 256  # one call adds the last reply's tool results and the loop's own few messages
MAX_CALL_ID_CHARS = 256
MAX_SHAPE_FIELDS = 32  # a call's instructions, tools and the few sampling settings the wire takes
MAX_SHAPE_VALUE_CHARS = 1024


class LoopTranscript(BaseModel):
    """How far the workflow's copy of the conversation goes: its length and its chain hash (`_transcript.py`)."""

    length: int = Field(ge=0)
    chain: str


class LoopCall(BaseModel):
    """One model call of the loop: the messages it adds to the `prefix_length` the workflow holds, and how to
    ask the model."""

    request_hash: str = Field(min_length=64, max_length=64)
    prefix_length: int = Field(ge=0)
    prefix_chain: str = Field(min_length=64, max_length=64)
    new_messages: list[Message] = Field(default_factory=list, max_length=MAX_NEW_MESSAGES)
    instructions: str | None = Field(default=None, max_length=MAX_INPUT_CHARS)
    tools: list[dict[str, Any]] = Field(default_factory=list, max_length=MAX_MODEL_TOOLS)
    settings: dict[str, Any] = Field(default_factory=dict)
    max_tokens: int | None = Field(default=None, ge=1)
    conversation: str | None = Field(
        default=None, min_length=64, max_length=64, description="the chain hash of every message the call sent"
    )
    shape: dict[str, str] = Field(
        default_factory=dict,
        max_length=MAX_SHAPE_FIELDS,
        description="what else names the call, field by field (`call_shape`): kept with its reply, so a call sent"
        " again on the same conversation with another setting is refused naming that setting",
    )

    @field_validator("shape")
    @classmethod
    def _bounded_shape(cls, shape: dict[str, str]) -> dict[str, str]:
        if any(len(k) > MAX_SHAPE_VALUE_CHARS or len(v) > MAX_SHAPE_VALUE_CHARS for k, v in shape.items()):
            raise ValueError(f"shape: keys and values of at most {MAX_SHAPE_VALUE_CHARS} characters")
        return shape


def call_shape(instructions: str | None, tools: list[dict[str, Any]], settings: dict[str, Any]) -> dict[str, str]:
    """A call's instructions and tools (as digests) and each sampling setting (as JSON), by the name the wire
    gives it: what `request_hash` folds into one hash, kept apart so a difference can be named."""
    shape = {"instructions": digest(instructions or ""), "tools": digest(tools)}
    for name, value in settings.items():
        text = canonical_json(value)
        shape[name] = text if len(text) <= MAX_SHAPE_VALUE_CHARS else digest(value)
    return shape


class LoopReply(BaseModel):
    """The model's answer to one call, as the loop gets it (again, unchanged, when its call is replayed)."""

    step: int
    message: Message | None = Field(
        description="the model's message; None in a replay once the task's stored conversation holds it, at"
        " `message_index` (the API reads it there: the workflow keeps no reply its checkpoint store has)"
    )
    message_index: int | None = Field(default=None, ge=0, description="where the message is in the conversation")
    finish_reason: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    served_by: str = ""
    replayed: bool = False
    asked_on: str | None = Field(default=None, description="the conversation of the call it answered (its chain)")
    asked_shape: dict[str, str] = Field(default_factory=dict, description="that call's shape (`call_shape`)")

    @property
    def answer(self) -> Message:
        """The message, once it is whole (a reply the API answers with always is)."""
        if self.message is None:
            raise ValueError(f"the reply of step {self.step} is in the task's stored conversation, not here")
        return self.message


class LoopToolResult(BaseModel):
    """What one of the loop's tools returned for a call the model made."""

    call_id: str = Field(min_length=1, max_length=MAX_CALL_ID_CHARS)
    content: str = Field(max_length=MAX_TOOL_RESULT_CHARS)


class LoopFinish(BaseModel):
    """The loop is done: its final output ends the task completed, an error ends it failed."""

    output: str | None = Field(default=None, max_length=MAX_INPUT_CHARS)
    error: str | None = Field(default=None, max_length=MAX_INPUT_CHARS)


class LoopProgress(BaseModel):
    """What the workflow knows of its loop, carried over continue-as-new.

    It keeps only what the checkpoint store does not hold yet: a reply's message and a tool's result leave it once
    the conversation written there contains them (None marks them), so a long loop's state stays small enough for
    Temporal's payloads however many calls it makes.
    """

    length: int = 0
    chain: str = ""
    replies: dict[str, LoopReply] = Field(default_factory=dict)
    tool_results: dict[str, str | None] = Field(
        default_factory=dict, description="by call id; None once the stored conversation holds the tool's message"
    )
    results_absorbed: list[str] = Field(
        default_factory=list, description="call ids whose results joined the conversation, not yet known written"
    )
    call_ids: list[str] = Field(default_factory=list)
    approvals: LoopApprovals | None = None  # the tool calls the loop last stopped at for a person's word
