"""The recorded corpus replays on the code under test: every history under histories/, named for what it covers.

histories/v0 holds runs written by the build before workflow versions (patch markers, some after a query moved
the code past a local activity: the evidence history among them); histories/v1 holds runs of this build's
version. A change that breaks one fails here with the workflow and its first mismatching event.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHistory

from orchestrator.replay.judge import WORKER_WORKFLOWS, judge
from orchestrator.replay.sources import from_files
from tests.replay.query_split import split_after_local_activities

HISTORIES = Path(__file__).parent / "histories"
EVIDENCE = HISTORIES / "v0" / "worker-restart-after-query-split.history.json"
RECORDED = sorted(HISTORIES.rglob("*.history.json"))


@pytest.mark.parametrize("path", RECORDED, ids=[str(p.relative_to(HISTORIES)) for p in RECORDED])
async def test_a_recorded_history_replays(path: Path) -> None:
    (verdict,) = await judge(from_files([path]))
    assert verdict.replays, verdict.describe()


def test_the_corpus_covers_both_versions_and_every_workflow_type() -> None:
    kinds = {p.parent.name for p in RECORDED}
    assert {"v0", "v1"} <= kinds
    for version in ("v0", "v1"):
        types = {_workflow_type(p) for p in RECORDED if p.parent.name == version}
        assert types == {w.__temporal_workflow_definition.name for w in WORKER_WORKFLOWS}, version  # type: ignore[attr-defined]  # set by @workflow.defn


def test_the_evidence_has_the_shape_that_wedged_its_task() -> None:
    """A local activity's marker closes a workflow task and the next, started in the same answer, carries the
    commands the code issued after it, the tool call and its patch marker: the shape the fix is for."""
    events = json.loads(EVIDENCE.read_text())["events"]
    by_id = {int(e["eventId"]): e for e in events}
    assert by_id[14]["markerRecordedEventAttributes"]["markerName"] == "core_local_activity"
    started = by_id[16]["workflowTaskStartedEventAttributes"]
    assert started["requestId"] == "request-from-RespondWorkflowTaskCompleted"
    assert by_id[18]["activityTaskScheduledEventAttributes"]["activityType"]["name"] == "berth.run_tool"
    assert by_id[19]["markerRecordedEventAttributes"]["markerName"] == "core_patch"


async def test_a_history_that_parts_from_the_code_is_named_with_its_first_mismatching_event() -> None:
    """The judge can fail: a recorded history whose tool call is renamed no longer matches the code, and the
    verdict names the workflow and the very event."""
    source = HISTORIES / "v1" / "tools-and-answer.1.history.json"
    history = json.loads(source.read_text())
    renamed = next(e for e in history["events"] if e["eventType"] == "EVENT_TYPE_ACTIVITY_TASK_SCHEDULED")
    renamed["activityTaskScheduledEventAttributes"]["activityType"]["name"] = "berth.not_the_code"
    (verdict,) = await judge([WorkflowHistory.from_json("tampered-task", history)])
    assert not verdict.replays
    assert verdict.workflow_id == "tampered-task"
    assert verdict.mismatch is not None and verdict.mismatch.event_id == int(renamed["eventId"])
    assert verdict.mismatch.event_type == EventType.Name(EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED)
    assert "Nondeterminism" in verdict.mismatch.error


def _workflow_type(path: Path) -> str:
    first = json.loads(path.read_text())["events"][0]
    return first["workflowExecutionStartedEventAttributes"]["workflowType"]["name"]


SPLITTABLE = [p for p in RECORDED if split_after_local_activities(json.loads(p.read_text()))[1] > 0]


@pytest.mark.parametrize("path", SPLITTABLE, ids=[str(p.relative_to(HISTORIES)) for p in SPLITTABLE])
async def test_a_recorded_history_replays_when_a_query_moved_the_code_after_its_local_activities(path: Path) -> None:
    """Rewritten into the shape a query gives a live run (the code after a local activity in a workflow task of
    its own; query_split.py), every recorded history still replays. On the build before workflow versions, 10
    of the 42 version-0 histories so rewritten failed, each at a patch marker."""
    split, splits = split_after_local_activities(json.loads(path.read_text()))
    (verdict,) = await judge([WorkflowHistory.from_json(f"{path.stem}-split", split)])
    assert verdict.replays, f"{splits} workflow task(s) split: {verdict.describe()}"


def test_the_split_rewrite_gives_the_evidence_its_own_shape() -> None:
    """The rewrite is faithful: applied to a run recorded without a query, it yields what the evidence shows."""
    source = json.loads((HISTORIES / "v0" / "tools-and-answer.1.history.json").read_text())
    split, splits = split_after_local_activities(source)
    assert splits > 0
    events = split["events"]
    assert [int(e["eventId"]) for e in events] == list(range(1, len(events) + 1))
    forced = [
        e
        for e in events
        if e.get("workflowTaskStartedEventAttributes", {}).get("requestId", "").startswith("request-from")
    ]
    assert len(forced) == splits
    for started in forced:
        previous = events[int(started["eventId"]) - 3]  # marker, scheduled, started
        assert previous["markerRecordedEventAttributes"]["markerName"] == "core_local_activity"
