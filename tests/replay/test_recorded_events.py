"""Every event the workflows of the recorded corpus write fits its model in sdk/wire/task_events.py.

A history holds a local activity's result, not its input, so the events are taken where the workflow code
makes them: each history is replayed with an interceptor that keeps every `record_state` input, and each event
is checked as the control plane's record_state activity checks it (the task's state under the details, then
`recorded_data`). The writers in workflows/ build dicts; this is what holds them to the union.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from temporalio import workflow
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import (
    Interceptor,
    Replayer,
    StartLocalActivityInput,
    UnsandboxedWorkflowRunner,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
    WorkflowOutboundInterceptor,
)

from activities.bookkeeping import event_data
from orchestrator.replay.judge import WORKER_WORKFLOWS
from orchestrator.replay.sources import from_files
from sdk.wire.contracts import RECORD_STATE_ACTIVITY, RecordStateInput
from sdk.wire.task_events import DATA_OF, recorded_data

HISTORIES = Path(__file__).parent / "histories"
RECORDED = sorted(HISTORIES.rglob("*.history.json"))
# The kinds workflows/ writes through record_state (its `record_event(kind, details)` calls).
WORKFLOW_KINDS = {
    "state",
    "interruption",
    "generation_quiet",
    "replica_loading",
    "replica_loaded",
    "waiting_for_tool_worker",
    "approval_asked",
    "approval_decided",
}

# What the replays sent to record_state.
_SENT: list[RecordStateInput] = []


class _KeepsRecordState(WorkflowOutboundInterceptor):
    def start_local_activity(self, input: StartLocalActivityInput) -> workflow.LocalActivityHandle[Any]:
        if input.activity == RECORD_STATE_ACTIVITY:
            _SENT.append(RecordStateInput.model_validate(input.args[0].model_dump()))
        return super().start_local_activity(input)


class _Inbound(WorkflowInboundInterceptor):
    def init(self, outbound: WorkflowOutboundInterceptor) -> None:
        super().init(_KeepsRecordState(outbound))


class _Keeper(Interceptor):
    def workflow_interceptor_class(self, input: WorkflowInterceptorClassInput) -> type[WorkflowInboundInterceptor]:
        return _Inbound


async def test_every_event_the_recorded_workflows_write_parses_into_its_model() -> None:
    # Unsandboxed, so that the interceptor fills this module's list and not a sandbox's copy of it.
    replayer = Replayer(
        workflows=list(WORKER_WORKFLOWS),
        data_converter=pydantic_data_converter,
        interceptors=[_Keeper()],
        workflow_runner=UnsandboxedWorkflowRunner(),
    )
    _SENT.clear()
    # Whether each replays is test_recorded_histories' verdict; the events are kept up to a mismatch either way.
    for history in from_files(RECORDED):
        await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert _SENT, "the corpus replayed no record_state call"
    kinds = set()
    for sent in _SENT:
        recorded = recorded_data(sent.event, event_data(sent))  # raises MalformedEvent, naming the field
        assert type(recorded) is DATA_OF[sent.event]
        kinds.add(sent.event)
    # One input per record_state the histories hold, and every kind the workflows write among them.
    assert len(_SENT) == sum(map(_record_state_markers, RECORDED))
    assert kinds == WORKFLOW_KINDS, kinds


def _record_state_markers(path: Path) -> int:
    """The record_state calls a history holds: its local activity markers name the activity (not the input)."""
    count = 0
    for event in json.loads(path.read_text())["events"]:
        marker = event.get("markerRecordedEventAttributes", {})
        for payload in marker.get("details", {}).get("data", {}).get("payloads", []):
            count += json.loads(base64.b64decode(payload["data"])).get("activity_type") == RECORD_STATE_ACTIVITY
    return count
