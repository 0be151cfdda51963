"""The task events' union (sdk/wire/task_events.py): each kind parses into its class, rows of older versions
parse too (an unknown kind or a refused row is an UnknownEvent, kept), and a writer's malformed event is an
error that names the field. The events the workflows write are built here as workflows/ builds them; the
recorded corpus holds them to the same check (tests/replay/test_recorded_events.py)."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import get_args

import pytest

from activities.bookkeeping import TaskBookkeeping, event_data
from orchestrator.reconcile.reconciler import _ended_event
from orchestrator.store import Store
from sdk import Spend, TaskEvent, TaskState, TaskStatus
from sdk.wire.contracts import RecordStateInput
from sdk.wire.task_events import (
    DATA_OF,
    KNOWN_EVENTS,
    ApprovalAskedEvent,
    InterruptionEvent,
    MalformedEvent,
    ModelCall,
    ModelCallEvent,
    StateChangeEvent,
    StepRecordedEvent,
    TypedTaskEvent,
    UnknownEvent,
    WorkflowTaskFailingEvent,
    parse_event,
    recorded_data,
)

AT = datetime(2026, 12, 6, 7, 0, tzinfo=UTC)


def stored(kind: str, data: dict) -> TaskEvent:
    return TaskEvent(seq=7, task_id="t-1", kind=kind, at=AT, data=data)


def state(status: TaskStatus = TaskStatus.running, **fields: object) -> TaskState:
    return TaskState(
        task_id="t-1",
        agent="writer",
        agent_version="1",
        model="m",
        tenant="acme",
        status=status,
        step=3,
        max_steps=10,
        spend=Spend(token_limit=5000, tokens_used=900),
        **fields,  # type: ignore[arg-type]  # the test's own extra state fields
    )


# What workflows/ hands record_state for each kind it writes, keys as its writers spell them (an approval's
# calls are each ToolCallToApprove.model_dump()).
WORKFLOW_DETAILS: dict[str, dict | None] = {
    "state": None,
    "interruption": {
        "step": 3,
        "node_id": "gpu-1",
        "replica_id": "r-1",
        "kind": "lost",
        "detail": "heartbeats stopped",
        "at": AT.isoformat(),
        "tokens_kept": 40,
        "tokens_lost": 12,
        "resumed_on": "gpu-2",
        "resumed_replica": "r-2",
        "resumed_tier": "disk",
        "resume_s": 3.25,
    },
    "generation_quiet": {
        "step": 3,
        "node_id": "gpu-1",
        "replica_id": "r-1",
        "detail": "no heartbeat for 30 s",
        "continued": 1,
        "tokens_carried": 52,
        "at": AT.isoformat(),
    },
    "replica_loading": {"node_id": "gpu-1", "replica_id": "r-1", "model": "m", "tier": "origin"},
    "replica_loaded": {"node_id": "gpu-1", "replica_id": "r-1", "seconds": 41.5},
    "waiting_for_tool_worker": {"task_queue": "tools-writer", "tool": "search"},
    "approval_asked": {
        "calls": [{"call_id": "c-1", "tool": "delete_file", "arguments": '{"path": "/tmp/x"}'}],
        "trace_id": "trace_0123",
    },
    "approval_decided": {"call_ids": ["c-1"], "approved": False, "reason": "not that file"},
}


@pytest.mark.parametrize("kind", sorted(WORKFLOW_DETAILS))
def test_each_event_the_workflows_write_is_checked_into_its_model_and_parses_back(kind: str) -> None:
    data = event_data(RecordStateInput(state=state(), event=kind, details=WORKFLOW_DETAILS[kind]))
    checked = recorded_data(kind, data)
    assert type(checked) is DATA_OF[kind]
    # Stored as sent, read back through JSON (as the log and the stream carry it): the same event, typed.
    event = parse_event(json.loads(stored(kind, json.loads(json.dumps(data))).model_dump_json()))
    assert event.kind == kind and not isinstance(event, UnknownEvent)
    assert event.data == checked
    assert event.data.status == TaskStatus.running  # type: ignore[union-attr]  # every workflow event carries the state


def test_the_union_has_one_class_per_kind_and_knows_every_kind_written() -> None:
    kinds = [e.KIND for e in KNOWN_EVENTS]
    assert len(kinds) == len(set(kinds)) and set(kinds) == set(DATA_OF)
    # The control plane's own writers: the books (step, llm_call), the reconciler and the own loop's trace route.
    assert set(WORKFLOW_DETAILS) | {
        "step",
        "llm_call",
        "workflow_task_failing",
        "workflow_task_recovered",
        "loop_trace",
    } == set(DATA_OF)


def test_each_member_of_the_union_is_tagged_with_its_own_kind() -> None:
    union, _discriminator = get_args(TypedTaskEvent)
    tagged = {get_args(member)[0]: get_args(member)[1].tag for member in get_args(union)}
    assert {cls: tag for cls, tag in tagged.items() if cls is not UnknownEvent} == {e: e.KIND for e in KNOWN_EVENTS}


def test_fields_read_as_attributes_with_their_types() -> None:
    interruption = parse_event(stored("interruption", WORKFLOW_DETAILS["interruption"] or {}))
    assert isinstance(interruption, InterruptionEvent)
    cut = interruption.data
    assert (cut.kind, cut.node_id, cut.tokens_kept, cut.resume_s, cut.at) == ("lost", "gpu-1", 40, 3.25, AT)

    call = parse_event(stored("llm_call", ModelCall(step=2, model="m", ttft_s=0.4, tier="disk").data()))
    match call:
        case ModelCallEvent(data=ModelCall(step=step, tier=tier)):
            assert (step, tier) == (2, "disk")
        case _:
            pytest.fail(f"not a model call: {call!r}")

    ended = parse_event(
        stored("state", {"status": "failed", "step": 4, "error": "boom", "ended_in_temporal": "terminated"})
    )
    assert isinstance(ended, StateChangeEvent)
    assert ended.data.status == TaskStatus.failed and ended.data.ended_in_temporal == "terminated"

    failing = parse_event(stored("workflow_task_failing", {"failures": 3, "since": AT.isoformat(), "error": "nd"}))
    assert isinstance(failing, WorkflowTaskFailingEvent) and failing.data.failures == 3


def test_a_row_of_an_older_version_parses_with_defaults_for_what_it_lacks() -> None:
    step = parse_event(stored("step", {"step": 1}))
    assert isinstance(step, StepRecordedEvent)
    assert (step.data.step, step.data.tool_calls, step.data.tokens_used) == (1, [], None)
    call = parse_event(stored("llm_call", {"step": 1, "model": "m"}))
    assert isinstance(call, ModelCallEvent) and call.data.ttft_s is None and call.data.served_by == ""
    # A key no model has (an older writer's) is left out of the typed view, and stays in the stored row.
    cut = parse_event(stored("interruption", {"node": "gpu-1"}))
    assert isinstance(cut, InterruptionEvent) and cut.data.node_id is None


def test_an_unknown_kind_or_a_refused_row_is_kept_as_an_unknown_event() -> None:
    child = parse_event(stored("child", {"child_id": "t-2"}))
    assert isinstance(child, UnknownEvent)
    assert (child.kind, child.data, child.problem) == ("child", {"child_id": "t-2"}, None)

    bad = parse_event(stored("llm_call", {"step": "two"}))
    assert isinstance(bad, UnknownEvent) and bad.kind == "llm_call" and bad.data == {"step": "two"}
    assert bad.problem is not None and "step" in bad.problem


def test_parse_takes_the_log_event_its_dict_or_its_json() -> None:
    event = stored("approval_asked", {"calls": [{"call_id": "c", "tool": "t"}]})
    for raw in (event, event.model_dump(), event.model_dump_json(), event.model_dump_json().encode()):
        parsed = parse_event(raw)
        assert isinstance(parsed, ApprovalAskedEvent)
        assert parsed.data.calls[0].tool == "t" and parsed.seq == 7 and parsed.at == AT


@pytest.mark.parametrize(
    ("kind", "details", "named"),
    [
        ("interruption", {"nod_id": "gpu-1"}, "'nod_id'"),  # a typo is not silently dropped
        ("interruption", {"tokens_kept": "many"}, "'tokens_kept'"),
        ("approval_asked", {"calls": [{"tool": "t"}]}, "'calls.0.call_id'"),
        ("replica_loaded", {"seconds": "slow"}, "'seconds'"),
        ("no_such_kind", {}, "'no_such_kind'"),
    ],
)
def test_a_malformed_event_from_a_writer_is_an_error_naming_the_field(kind: str, details: dict, named: str) -> None:
    with pytest.raises(MalformedEvent, match=named):
        recorded_data(kind, event_data(RecordStateInput(state=state(), event=kind, details=details)))


def test_record_state_refuses_a_malformed_event_before_it_writes_anything(store: Store) -> None:
    books = TaskBookkeeping(store.checkpoints, store.tasks, store.events, store.agents)
    task = state().model_copy(update={"task_id": f"t-{uuid.uuid4().hex[:8]}"})
    with pytest.raises(MalformedEvent, match="'resume_s'"):
        books.record_state(RecordStateInput(state=task, event="interruption", details={"resume_s": "soon"}))
    assert store.events.read(task.task_id) == []

    books.record_state(RecordStateInput(state=task, event="interruption", details=WORKFLOW_DETAILS["interruption"]))
    [row] = store.events.read(task.task_id)
    assert row.data == event_data(
        RecordStateInput(state=task, event="interruption", details=WORKFLOW_DETAILS["interruption"])
    )


def test_the_control_planes_own_writers_store_the_rows_they_always_did_and_parse_back() -> None:
    """The reconciler's end of a task: the eight fields a final state event always had, typed on reading."""
    final = state(TaskStatus.failed, error="terminated in Temporal")
    row = _ended_event(final, "terminated")
    assert row == {
        "status": "failed",
        "step": 3,
        "tokens_used": 900,
        "token_limit": 5000,
        "waiting_for": None,
        "result": None,
        "error": "terminated in Temporal",
        "ended_in_temporal": "terminated",
    }
    ended = parse_event(stored("state", row))
    assert isinstance(ended, StateChangeEvent) and ended.data.ended_in_temporal == "terminated"
