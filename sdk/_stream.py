"""A task as it happens, typed: what `TaskHandle.stream()` yields.

The stored events (state changes, finished steps with the tools they call, model calls, interruptions) become
classes with their main fields, and `TokenDelta`s carry the answer's text as it is written: the API follows
each piece from the node that generates it, as the engine writes it. Deltas are never stored and never enter
the workflow's history.

A step's deltas always add up to the step's text: `text[:delta.offset] + delta.text` is the text so far. When
a generation is cut (its node preempted or lost) and the attempt that takes the step over writes otherwise than
what was sent, a `TextReset` says from which offset the text held is void; deltas go on from there. Before a
step's `StepFinished`, the stream sends whatever the client still lacks of the stored step's text. A stream
that reconnects resumes from its last stored event and gets the running step's text again from its start
(offset 0): apply each delta at its offset and nothing is doubled.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from ._state import TaskEvent, TaskStatus


class TokenDelta(BaseModel):
    """Text the model wrote since the previous delta of the same step, at character `offset` of the step's text
    (the length of what the earlier deltas and resets of the step left)."""

    task_id: str
    step: int
    text: str
    offset: int = 0


class TextReset(BaseModel):
    """The step's text received so far is void from character `offset` on: an attempt that took the step over
    after a cut wrote otherwise. Keep `text[:offset]`; the next deltas continue from there."""

    task_id: str
    step: int
    offset: int


class Writing(BaseModel):
    """The whole text a running step has written so far (for a caller that polls rather than streams)."""

    task_id: str
    step: int
    text: str


class StreamEvent(BaseModel):
    """A stored event of the task's log: `kind` and its whole `data`, with the typed fields of each subclass."""

    task_id: str
    seq: int
    at: datetime
    kind: str
    data: dict[str, Any] = Field(default_factory=dict)


class StateChanged(StreamEvent):
    status: TaskStatus
    step: int = 0
    waiting_for: str | None = None


class BudgetWaiting(StateChanged):
    """The task waits for `raise_budget`: `waiting_for` says how much more its next step needs."""


class Ended(StateChanged):
    """The task is final: `status` says how, `result` holds its answer (or its partial one)."""

    result: str | None = None
    error: str | None = None


class StepFinished(StreamEvent):
    """A step's checkpoint is written: its answer or the tools it called (`tool_calls`, run next)."""

    step: int
    tokens_used: int = 0
    tool_calls: list[str] = Field(default_factory=list)


class ModelCalled(StreamEvent):
    step: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0


class Interrupted(StreamEvent):
    """A step's node was lost or preempted: the step resumes on another one."""


def typed(event: TaskEvent) -> StreamEvent:
    """The stored event as its class (a kind without one stays a plain StreamEvent)."""
    base = {"task_id": event.task_id, "seq": event.seq, "at": event.at, "kind": event.kind, "data": event.data}
    data = event.data
    if event.kind == "state" and "status" in data:
        status = TaskStatus(data["status"])
        fields = {**base, "status": status, "step": data.get("step", 0), "waiting_for": data.get("waiting_for")}
        if status.is_final:
            return Ended(**fields, result=data.get("result"), error=data.get("error"))
        return (BudgetWaiting if status == TaskStatus.awaiting_budget else StateChanged)(**fields)
    if event.kind == "step":
        return StepFinished(
            **base,
            step=data.get("step", 0),
            tokens_used=data.get("tokens_used", 0),
            tool_calls=list(data.get("tool_calls") or []),
        )
    if event.kind == "llm_call":
        return ModelCalled(
            **base,
            step=data.get("step", 0),
            prompt_tokens=data.get("prompt_tokens", 0),
            completion_tokens=data.get("completion_tokens", 0),
        )
    if event.kind == "interruption":
        return Interrupted(**base)
    return StreamEvent(**base)
