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
from .wire.task_events import InterruptionEvent, ModelCallEvent, StateChangeEvent, StepRecordedEvent, parse_event


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
    """The stored event as its class, read through the task events' models (sdk/wire/task_events.py); a kind
    without a class here, or a row its model refuses, stays a plain StreamEvent. `data` is the row's, as stored."""
    base = {"task_id": event.task_id, "seq": event.seq, "at": event.at, "kind": event.kind, "data": event.data}
    match parse_event(event):
        case StateChangeEvent(data=change) if change.status is not None:
            fields = {**base, "status": change.status, "step": change.step or 0, "waiting_for": change.waiting_for}
            if change.status.is_final:
                return Ended(**fields, result=change.result, error=change.error)
            return (BudgetWaiting if change.status == TaskStatus.awaiting_budget else StateChanged)(**fields)
        case StepRecordedEvent(data=step):
            return StepFinished(**base, step=step.step, tokens_used=step.tokens_used or 0, tool_calls=step.tool_calls)
        case ModelCallEvent(data=call):
            return ModelCalled(
                **base, step=call.step, prompt_tokens=call.prompt_tokens, completion_tokens=call.completion_tokens
            )
        case InterruptionEvent():
            return Interrupted(**base)
    return StreamEvent(**base)
