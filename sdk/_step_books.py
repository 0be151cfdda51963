"""What a GPU node's LLM step sends the control plane to do its bookkeeping, and what comes back.

A node agent has no database, so the step's bookkeeping (activities/ports.py `StepBooks`)
crosses HTTP: `prepare` writes the pending step and returns the conversation, `settle` books
the call; `booked` and `book_interrupted` serve retries and resumed attempts only. Each is one POST under
`/v1/nodes/{node_id}/steps/`, authenticated by the node's secret.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, FiniteFloat

from ._limits import StoredInt
from ._messages import Message
from ._spec import CheckpointRef
from .contracts import PendingStep


class PrepareStepRequest(BaseModel):
    task_id: str
    checkpoint: CheckpointRef
    pending: PendingStep | None = Field(default=None, description="the previous step, written before the read")


class PreparedStepBody(BaseModel):
    checkpoint: CheckpointRef = Field(description="after writing the pending step, when there was one")
    messages: list[Message] = Field(description="the conversation up to that checkpoint")


class LedgerEntryBody(BaseModel):
    """One LLM call's cost (activities/ports.py `LedgerEntry`), keyed (task, step, attempt)."""

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
    kind: Literal["settled", "lost", "kept"] = Field(
        default="settled", description='"settled": usage an engine reported; "lost"/"kept": tokens of an attempt'
                                       ' that died, which nobody received / which the reply went on from')
    response_id: str = ""


class SettleStepRequest(BaseModel):
    entry: LedgerEntryBody
    event: dict = Field(description='the "llm_call" event, appended only when the entry is newly booked')


class SettleStepResult(BaseModel):
    recorded: bool = Field(description="false when the entry was booked already (a retried settle)")


class BookedRequest(BaseModel):
    task_id: str
    step: StoredInt
    before_attempt: StoredInt


class BookInterruptedRequest(BaseModel):
    entries: list[LedgerEntryBody]
