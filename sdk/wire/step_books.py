"""What a GPU node's LLM step sends the control plane to do its bookkeeping, and what comes back.

A node agent has no database, so the step's bookkeeping (activities/step/ports.py `StepBooks`)
crosses HTTP: `prepare` returns the conversation to send and the answer tokens granted, `settle`
books the call; `booked` and `interrupted` serve retries and resumed attempts only. Each is one
POST under `/v1/nodes/{node_id}/steps/`, authenticated by the node's secret and naming the lease
the node holds. A node may lie, so it sends only what it alone can know (the engine's usage and
timing) and every number is bounded here; which task and step, the model, the tenant and every
price come from the lease and the catalogue on the control plane's side.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, FiniteFloat

from .._messages import Message
from .._spec import CheckpointRef
from .lease import StepPlacement
from .limits import MAX_INPUT_CHARS, MAX_MODEL_TOOLS, MAX_STORED_INT, MAX_TOKENS_PER_STEP, StoredInt
from .task_events import ModelCall

_STRICT = ConfigDict(extra="forbid")
LEASE_ID = Field(min_length=1, max_length=64, description="the lease the node holds for the step")
# A reply id (vLLM's are ~40 characters), a finish reason, a tool name: bounded so a node cannot store a novel.
MAX_RESPONSE_ID_CHARS = 256
MAX_TOOL_CALLS = 128
MAX_SECONDS = 1e7  # a call's timing: nothing runs for four months
Seconds = Field(ge=0, le=MAX_SECONDS)
Attempt = Field(ge=1, le=MAX_STORED_INT)


class PrepareStepRequest(BaseModel):
    model_config = _STRICT

    lease_id: str = LEASE_ID
    attempt: int = Field(
        ge=1,
        le=MAX_STORED_INT,
        description="the attempt about to call the model: the control plane records it with what it reserved, and"
        " books under this step's round only for attempts it saw prepared",
    )
    checkpoint: CheckpointRef = Field(description="the task's current checkpoint, as the step's input names it")
    instructions: str | None = Field(
        default=None,
        max_length=MAX_INPUT_CHARS,
        description="the call's own instructions, as the step's input holds them",
    )
    tools: list[dict[str, Any]] = Field(
        default_factory=list, max_length=MAX_MODEL_TOOLS, description="the tool schemas the call offers the model"
    )


class PreparedStepBody(BaseModel):
    checkpoint: CheckpointRef = Field(description="the task's current checkpoint")
    messages: list[Message] = Field(description="the conversation up to that checkpoint")
    max_tokens: int = Field(description="answer tokens granted: what the lease's limits leave after the prompt")


class SettleStepRequest(BaseModel):
    """One model call as the node saw it; the control plane prices it and bounds it by the lease's reservation."""

    model_config = _STRICT

    lease_id: str = LEASE_ID
    attempt: int = Attempt
    prompt_tokens: StoredInt = Field(description="the engine's count, less the kept text a continuation re-sent")
    completion_tokens: StoredInt
    continued_tokens: StoredInt = 0
    ttft_s: FiniteFloat = Seconds
    duration_s: FiniteFloat = Seconds
    response_id: str = Field(default="", max_length=MAX_RESPONSE_ID_CHARS)
    finish_reason: str | None = Field(default=None, max_length=32)
    tool_calls: list[str] = Field(default_factory=list, max_length=MAX_TOOL_CALLS)
    placement: StepPlacement | None = Field(
        default=None, description="queue wait and load time as the step saw them; where it ran comes from the lease"
    )


class SettleStepResult(BaseModel):
    recorded: bool = Field(description="false when the entry was booked already (a retried settle)")
    cost_usd: float = Field(description="the call's price from the control plane's catalogue")


class BookedRequest(BaseModel):
    model_config = _STRICT

    lease_id: str = LEASE_ID
    before_attempt: int = Attempt


class LedgerEntryBody(BaseModel):
    """One LLM call's cost (ledger.py `LedgerEntry`), keyed (task, step, attempt)."""

    task_id: str
    step: StoredInt
    attempt: StoredInt
    model: str
    prompt_tokens: StoredInt
    completion_tokens: StoredInt
    cost_usd: FiniteFloat
    ttft_s: FiniteFloat
    duration_s: FiniteFloat
    served_by: str
    kind: Literal["settled", "lost", "kept"] = "settled"
    response_id: str = ""


class DeadAttemptBody(BaseModel):
    model_config = _STRICT

    attempt: int = Attempt
    kind: Literal["lost", "kept"] = Field(
        description='"lost": nobody received them; "kept": the reply went on from them'
    )
    tokens: int = Field(ge=1, le=MAX_TOKENS_PER_STEP)


class BookInterruptedRequest(BaseModel):
    model_config = _STRICT

    lease_id: str = LEASE_ID
    # A step's placements retry at most a few times each (workflows/fleet_step.py): far fewer than this.
    entries: list[DeadAttemptBody] = Field(min_length=1, max_length=256)


# The "llm_call" event the books write for a booked call: its model is the task event union's (task_events.py).
LlmCallEvent = ModelCall
