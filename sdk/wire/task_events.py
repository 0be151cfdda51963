"""A task's events, typed: one model per kind, one discriminated union, one parser.

The log stores an event as (seq, task_id, kind, at, data) and the API streams it in that shape; the `data`
of each kind is a model here, and the event as a whole is `TypedTaskEvent`, a union on `kind`. Everything that
reads events (the UI's timeline and pages, the CLI, the demo, the SDK's stream, the API's stream, the metrics)
parses them with `parse_event` and reads attributes, so a key is spelt once, in these models.

Reading is tolerant, because the log holds rows written by every earlier version: a kind this build does not
know, or a row its model refuses, becomes an `UnknownEvent` kept for display (with the reason), and a field an
older writer did not write takes its default. Writing is strict: `recorded_data` is what the control plane
checks an event from the workflow with before it is stored (a field no model has, or a value of the wrong
type, is an error that names the field).

The stored and streamed JSON is unchanged by any of this: a row's data is stored as written, and streams are
sent from the row, not from the model (which would add the defaults).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable, Mapping
from datetime import datetime
from typing import Annotated, Any, ClassVar, Literal, TypeVar, get_args

from pydantic import BaseModel, Discriminator, Field, Tag, TypeAdapter, ValidationError

from .._state import GpuTrouble, Stuck, TaskEvent, TaskStatus, ToolCallToApprove
from .lease import LocalityTier

# ----- what each kind's data holds ----------------------------------------------------------------------------


class TaskSnapshot(BaseModel):
    """The task's state as the workflow's events carry it: `record_state` writes it into every one of them
    (beside the event's own fields). None where a row does not say (an older writer, a test's partial row)."""

    status: TaskStatus | None = None
    step: int | None = None
    tokens_used: int | None = None
    token_limit: int | None = None
    waiting_for: str | None = None
    gpu_trouble: GpuTrouble | None = None
    result: str | None = None
    error: str | None = None
    question: str | None = None


class StateChange(TaskSnapshot):
    """`state`: the task's status, step or spend changed (the workflow's, or the control plane's at an end it
    found in Temporal)."""

    ended_in_temporal: str | None = Field(
        default=None, description="set by the control plane when the workflow ended without saying so: how"
    )


class StepRecorded(BaseModel):
    """`step`: a step's checkpoint is written (its answer, or the tools it called, which run next)."""

    step: int = 0
    checkpoint_seq: int | None = None
    tokens_used: int | None = None
    token_limit: int | None = None
    usd_used: float | None = None
    tool_calls: list[str] = Field(default_factory=list, description="the names of the tools the step called")


class ModelCall(BaseModel):
    """`llm_call`: a booked model call, what the UI, the model figures and the demo read.

    Built by the books from the ledger entry and the placement (on the fleet from the lease), never from a
    node's free-form dict, so every event has this shape and every number in it is bounded. The writer gives
    every field (`data()`); the defaults are for rows of older versions.
    """

    step: int = 0
    attempt: int = 1
    model: str = ""
    tenant: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    lost_tokens: int = 0
    kept_tokens: int = 0
    continued_tokens: int = 0
    cost_usd: float = 0.0
    ttft_s: float | None = None
    duration_s: float = 0.0
    tokens_per_s: float | None = None
    served_by: str = ""
    finish_reason: str | None = None
    tool_calls: list[str] = Field(default_factory=list)
    # Where it ran (None off the fleet).
    node_id: str | None = None
    replica_id: str | None = None
    gpu_indexes: list[int] | None = None
    gpu_type: str | None = None
    tier: LocalityTier | None = None
    decided_by: str | None = None
    queue_wait_s: float | None = None
    load_s: float | None = None

    def data(self) -> dict[str, Any]:
        """The event's data: every key, always (None where it does not apply), so readers meet one shape."""
        return self.model_dump(mode="json")


class Interruption(TaskSnapshot):
    """`interruption`: a step's node was lost under it, written once the step has its new place (or the step
    failed to find one): where it was, what it lost, where it resumed."""

    step: int = 0
    node_id: str | None = None
    replica_id: str | None = None
    kind: str = Field(default="", description="how the node was lost: lost, notice, replica_gone, stalled, ...")
    detail: str = ""
    at: datetime | None = Field(default=None, description="when the node was lost (the event is written later)")
    tokens_kept: int = 0
    tokens_lost: int = 0
    resumed_on: str | None = None
    resumed_replica: str | None = None
    resumed_tier: str | None = None
    resume_s: float | None = None


class GenerationQuiet(TaskSnapshot):
    """`generation_quiet`: a generation's heartbeats went quiet on a node that is alive; it goes on there."""

    step: int = 0
    node_id: str | None = None
    replica_id: str | None = None
    detail: str = ""
    continued: int = Field(default=0, description="how many times the step went on after a quiet spell")
    tokens_carried: int = 0
    at: datetime | None = None


class ReplicaLoading(TaskSnapshot):
    """`replica_loading`: the step's leased replica is loading (a cold start) before it can answer."""

    node_id: str | None = None
    replica_id: str | None = None
    model: str = ""
    tier: str | None = None


class ReplicaLoaded(TaskSnapshot):
    """`replica_loaded`: the replica the step waited for is ready, after `seconds`."""

    node_id: str | None = None
    replica_id: str | None = None
    seconds: float | None = None


class WaitingForToolWorker(TaskSnapshot):
    """`waiting_for_tool_worker`: a tool call waits on a queue no tool worker polls."""

    task_queue: str = ""
    tool: str = ""


class ApprovalAsked(TaskSnapshot):
    """`approval_asked`: the task's own loop waits for a person's word on these tool calls."""

    calls: list[ToolCallToApprove] = Field(default_factory=list)
    trace_id: str | None = None


class ApprovalDecided(TaskSnapshot):
    """`approval_decided`: a person approved or rejected waiting calls of the own loop."""

    call_ids: list[str] = Field(default_factory=list)
    approved: bool | None = None
    reason: str | None = None


class WorkflowTaskRecovered(BaseModel):
    """`workflow_task_recovered`: a stuck task's workflow code runs again (the control plane writes it)."""

    failures: int | None = None
    since: datetime | None = None


class LoopTrace(BaseModel):
    """`loop_trace`: the trace of a run of the task's own loop (the Agents SDK's trace id)."""

    trace_id: str = Field(min_length=1, max_length=256, description="the loop's trace (Agents SDK: trace_<32 hex>)")
    workflow_name: str | None = Field(default=None, max_length=256)
    group_id: str | None = Field(default=None, max_length=256)


# ----- the events: the log's envelope around each kind's data ---------------------------------------------------


class _Stored(BaseModel):
    """What the log adds to every event; `KIND` is the class's `kind`, for queries by kind."""

    KIND: ClassVar[str]

    seq: int
    task_id: str
    at: datetime

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        field = cls.model_fields.get("kind")
        if field is not None and (args := get_args(field.annotation)):
            cls.KIND = args[0]


class StateChangeEvent(_Stored):
    kind: Literal["state"] = "state"
    data: StateChange


class StepRecordedEvent(_Stored):
    kind: Literal["step"] = "step"
    data: StepRecorded


class ModelCallEvent(_Stored):
    kind: Literal["llm_call"] = "llm_call"
    data: ModelCall


class InterruptionEvent(_Stored):
    kind: Literal["interruption"] = "interruption"
    data: Interruption


class GenerationQuietEvent(_Stored):
    kind: Literal["generation_quiet"] = "generation_quiet"
    data: GenerationQuiet


class ReplicaLoadingEvent(_Stored):
    kind: Literal["replica_loading"] = "replica_loading"
    data: ReplicaLoading


class ReplicaLoadedEvent(_Stored):
    kind: Literal["replica_loaded"] = "replica_loaded"
    data: ReplicaLoaded


class WaitingForToolWorkerEvent(_Stored):
    kind: Literal["waiting_for_tool_worker"] = "waiting_for_tool_worker"
    data: WaitingForToolWorker


class ApprovalAskedEvent(_Stored):
    kind: Literal["approval_asked"] = "approval_asked"
    data: ApprovalAsked


class ApprovalDecidedEvent(_Stored):
    kind: Literal["approval_decided"] = "approval_decided"
    data: ApprovalDecided


class WorkflowTaskFailingEvent(_Stored):
    """`workflow_task_failing`: Temporal cannot run the task's workflow code (written by the control plane)."""

    kind: Literal["workflow_task_failing"] = "workflow_task_failing"
    data: Stuck


class WorkflowTaskRecoveredEvent(_Stored):
    kind: Literal["workflow_task_recovered"] = "workflow_task_recovered"
    data: WorkflowTaskRecovered


class LoopTraceEvent(_Stored):
    kind: Literal["loop_trace"] = "loop_trace"
    data: LoopTrace


class UnknownEvent(_Stored):
    """An event this build has no model for (a kind of an older or newer version, or a row its kind's model
    refuses): kept as stored, for display, with the reason it is not typed."""

    kind: str
    data: dict[str, Any] = Field(default_factory=dict)
    problem: str | None = Field(default=None, description="why it is not typed; None for a kind without a model")


KNOWN_EVENTS: tuple[type[_Stored], ...] = (
    StateChangeEvent,
    StepRecordedEvent,
    ModelCallEvent,
    InterruptionEvent,
    GenerationQuietEvent,
    ReplicaLoadingEvent,
    ReplicaLoadedEvent,
    WaitingForToolWorkerEvent,
    ApprovalAskedEvent,
    ApprovalDecidedEvent,
    WorkflowTaskFailingEvent,
    WorkflowTaskRecoveredEvent,
    LoopTraceEvent,
)
# kind -> the model of its data
DATA_OF: dict[str, type[BaseModel]] = {e.KIND: e.model_fields["data"].annotation for e in KNOWN_EVENTS}  # type: ignore[misc]  # every known event's data is a model class
# a data model -> the kind it is stored under (each model is one kind's)
KIND_OF: dict[type[BaseModel], str] = {model: kind for kind, model in DATA_OF.items()}
# What a task's workflow writes into its log (`record_state` adds the task's state to each).
WorkflowEventData = (
    Interruption
    | GenerationQuiet
    | ReplicaLoading
    | ReplicaLoaded
    | WaitingForToolWorker
    | ApprovalAsked
    | ApprovalDecided
)
# The workflow's one event writer: the event's data, stored under its kind beside the task's state.
EventWriter = Callable[[WorkflowEventData], Awaitable[None]]
_UNKNOWN = "unknown"


def _kind_tag(value: Any) -> str:
    kind = value.get("kind") if isinstance(value, Mapping) else getattr(value, "kind", None)
    return kind if kind in DATA_OF else _UNKNOWN


TypedTaskEvent = Annotated[
    Annotated[StateChangeEvent, Tag("state")]
    | Annotated[StepRecordedEvent, Tag("step")]
    | Annotated[ModelCallEvent, Tag("llm_call")]
    | Annotated[InterruptionEvent, Tag("interruption")]
    | Annotated[GenerationQuietEvent, Tag("generation_quiet")]
    | Annotated[ReplicaLoadingEvent, Tag("replica_loading")]
    | Annotated[ReplicaLoadedEvent, Tag("replica_loaded")]
    | Annotated[WaitingForToolWorkerEvent, Tag("waiting_for_tool_worker")]
    | Annotated[ApprovalAskedEvent, Tag("approval_asked")]
    | Annotated[ApprovalDecidedEvent, Tag("approval_decided")]
    | Annotated[WorkflowTaskFailingEvent, Tag("workflow_task_failing")]
    | Annotated[WorkflowTaskRecoveredEvent, Tag("workflow_task_recovered")]
    | Annotated[LoopTraceEvent, Tag("loop_trace")]
    | Annotated[UnknownEvent, Tag(_UNKNOWN)],
    Discriminator(_kind_tag),
]
_EVENTS: TypeAdapter[TypedTaskEvent] = TypeAdapter(TypedTaskEvent)
_E = TypeVar("_E", bound=_Stored)


class MalformedEvent(ValueError):
    """An event a writer sent does not fit its kind's model; the message names the kind and the field."""


def parse_event(raw: TaskEvent | Mapping[str, Any] | str | bytes) -> TypedTaskEvent:
    """A stored or streamed event (the log's TaskEvent, its dict, or its JSON) as its kind's class. Never
    raises for what the log may hold: an unknown kind, or data its model refuses, is an `UnknownEvent`."""
    if isinstance(raw, TaskEvent):
        fields: dict[str, Any] = {
            "seq": raw.seq,
            "task_id": raw.task_id,
            "kind": raw.kind,
            "at": raw.at,
            "data": raw.data,
        }
    elif isinstance(raw, str | bytes):
        fields = json.loads(raw)
    else:
        fields = dict(raw)
    try:
        return _EVENTS.validate_python(fields)
    except ValidationError as e:
        envelope = {k: fields.get(k) for k in ("seq", "task_id", "kind", "at")}
        data = fields.get("data")
        return UnknownEvent.model_validate(
            {**envelope, "data": data if isinstance(data, dict) else {}, "problem": _first_problem(e)}
        )


def events_of(cls: type[_E], events: Iterable[TaskEvent]) -> list[_E]:
    """The events of one class among `events` (a read of the log by its kind), parsed."""
    return [e for e in map(parse_event, events) if isinstance(e, cls)]


def recorded_data(kind: str, data: Mapping[str, Any]) -> BaseModel:
    """The data of an event a writer is about to store, checked against its kind's model: a kind without one,
    a field the model does not have (a typo, a key nobody reads) or a value of the wrong type is a
    `MalformedEvent` that names it. Fields not given take their defaults, as they do on reading."""
    model = DATA_OF.get(kind)
    if model is None:
        raise MalformedEvent(f"event kind {kind!r} has no model in sdk/wire/task_events.py (known: {sorted(DATA_OF)})")
    unknown = sorted(set(data) - set(model.model_fields))
    if unknown:
        raise MalformedEvent(f"{kind} event: field {unknown[0]!r} is not one of {model.__name__}'s")
    try:
        return model.model_validate(dict(data))
    except ValidationError as e:
        raise MalformedEvent(f"{kind} event: {_first_problem(e)}") from e


def _first_problem(error: ValidationError) -> str:
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or "(the event)"
    return f"field {where!r}: {first['msg']}"
