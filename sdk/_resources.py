"""What the HTTP API returns besides tasks and agents: checkpoints, ledgers, forks, errors.

The API serves these shapes and the SDK parses them, so they live here, where both can
import them (the SDK never imports the orchestrator).
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from ._budget import Budget
from ._limits import MAX_INPUT_CHARS, MAX_STEPS, TASK_ID_PATTERN
from ._messages import Message
from ._spec import CheckpointRef


class CheckpointSummary(BaseModel):
    """One checkpoint of a task, without its conversation: enough to pick one to fork from."""

    model_config = ConfigDict(from_attributes=True)

    seq: int
    step: int
    id: int
    hash: str
    created_at: datetime | None = None
    message_count: int = 0
    delta_bytes: int = 0


class CheckpointDetail(BaseModel):
    """A checkpoint read back whole: the conversation up to it, its scratch and task state."""

    model_config = ConfigDict(from_attributes=True)

    ref: CheckpointRef
    task_id: str
    messages: list[Message]
    scratch: dict = Field(default_factory=dict)
    state: dict = Field(default_factory=dict)


class LedgerEntry(BaseModel):
    """One LLM call's cost and where it ran; `kind` is "lost" for tokens of an attempt that died."""

    model_config = ConfigDict(from_attributes=True)

    task_id: str
    step: int
    attempt: int
    model: str
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    ttft_s: float = 0.0
    duration_s: float = 0.0
    served_by: str = ""
    kind: str = "settled"


class LedgerTotals(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    lost_tokens: int = 0
    cost_usd: float = 0.0


class Ledger(BaseModel):
    task_id: str
    entries: list[LedgerEntry]
    totals: LedgerTotals


class ForkRequest(BaseModel):
    """Start a new task from one of another task's checkpoints, optionally with other limits."""

    model_config = ConfigDict(extra="forbid")

    checkpoint_seq: int = Field(ge=0)
    task_id: str | None = Field(default=None, pattern=TASK_ID_PATTERN)
    budget: Budget | None = None
    model: str | None = Field(default=None, min_length=1, max_length=200)
    input: str | None = Field(default=None, min_length=1, max_length=MAX_INPUT_CHARS)
    max_steps: int | None = Field(default=None, ge=1, le=MAX_STEPS)


class ErrorDetail(BaseModel):
    code: str = Field(description="invalid | not_found | conflict | unavailable | unauthorized | too_large | internal")
    message: str
    field: str | None = Field(default=None, description="dotted path of the offending field, e.g. budget.tokens")


class ErrorBody(BaseModel):
    """The one shape every API error has."""

    error: ErrorDetail
