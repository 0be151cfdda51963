"""Rewrite a history into the shape a query gives it: the code after a local activity in a workflow task of its own.

Live, when a query reaches the worker while a local activity's result waits for the workflow code, Core closes
the workflow task with the activity's marker and runs the code after it in a new one, started in the same
answer (the evidence history's events 14-18). This makes that shape out of any recorded history: after the
first local-activity marker of each workflow task that other commands follow, the task is closed and a new one
scheduled, started and completed, and the rest of its commands belong to the new one. Event ids are renumbered
and every reference to one follows. A history that replays must still replay so rewritten.
"""

from __future__ import annotations

import copy
from typing import Any

_LA_MARKER = "core_local_activity"


def split_after_local_activities(history: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """The rewritten history (proto3 JSON, as exported) and how many workflow tasks were split."""
    events = history["events"]
    out: list[dict[str, Any]] = []
    splits = 0
    i = 0
    while i < len(events):
        event = copy.deepcopy(events[i])
        out.append(event)
        i += 1
        if event["eventType"] != "EVENT_TYPE_WORKFLOW_TASK_COMPLETED":
            continue
        completed_id = event["eventId"]
        batch = []
        while i < len(events) and _command_of(events[i]) == completed_id:
            batch.append(copy.deepcopy(events[i]))
            i += 1
        cut = next(
            (n + 1 for n, e in enumerate(batch[:-1]) if _is_la_marker(e) and not _is_la_marker(batch[n + 1])), None
        )
        if cut is None:
            out.extend(batch)
            continue
        splits += 1
        out.extend(batch[:cut])
        out.extend(_new_workflow_task(events, event, batch[cut - 1]))
        for moved in batch[cut:]:
            _attributes(moved)["workflowTaskCompletedEventId"] = "NEW-COMPLETED"
            out.append(moved)
    return {**history, "events": _renumbered(out)}, splits


def _new_workflow_task(events: list[dict], completed: dict, after: dict) -> list[dict]:
    started = _attributes(completed)
    queue = next(
        _attributes(e)["taskQueue"]
        for e in reversed(events[: int(completed["eventId"])])
        if e["eventType"] == "EVENT_TYPE_WORKFLOW_TASK_SCHEDULED"
    )
    at = after["eventTime"]
    return [
        {
            "eventId": "NEW-SCHEDULED",
            "eventTime": at,
            "eventType": "EVENT_TYPE_WORKFLOW_TASK_SCHEDULED",
            "workflowTaskScheduledEventAttributes": {"taskQueue": queue, "startToCloseTimeout": "10s", "attempt": 1},
        },
        {
            "eventId": "NEW-STARTED",
            "eventTime": at,
            "eventType": "EVENT_TYPE_WORKFLOW_TASK_STARTED",
            "workflowTaskStartedEventAttributes": {
                "scheduledEventId": "NEW-SCHEDULED",
                "identity": started.get("identity", "berth-test"),
                "requestId": "request-from-RespondWorkflowTaskCompleted",
            },
        },
        {
            "eventId": "NEW-COMPLETED",
            "eventTime": at,
            "eventType": "EVENT_TYPE_WORKFLOW_TASK_COMPLETED",
            "workflowTaskCompletedEventAttributes": {
                "scheduledEventId": "NEW-SCHEDULED",
                "startedEventId": "NEW-STARTED",
                "identity": started.get("identity", "berth-test"),
            },
        },
    ]


def _renumbered(events: list[dict]) -> list[dict]:
    """Ids 1..n in order; references to old ids (and to the NEW-* placeholders of each split) follow."""
    mapping: dict[str, str] = {}
    pending: dict[str, str] = {}
    for n, event in enumerate(events, 1):
        old = str(event["eventId"])
        if old.startswith("NEW-"):
            pending[old] = str(n)
        else:
            mapping[old] = str(n)
        event["eventId"] = str(n)
        _remap(event, mapping, pending)
    return events


def _remap(node: Any, mapping: dict[str, str], pending: dict[str, str]) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            if key.endswith("EventId") and key != "eventId" and isinstance(value, str | int):
                text = str(value)
                node[key] = pending[text] if text.startswith("NEW-") else mapping.get(text, text)
            else:
                _remap(value, mapping, pending)
    elif isinstance(node, list):
        for item in node:
            _remap(item, mapping, pending)


def _attributes(event: dict) -> dict:
    return next(v for k, v in event.items() if k.endswith("EventAttributes"))


def _command_of(event: dict) -> str | None:
    value = _attributes(event).get("workflowTaskCompletedEventId")
    return None if value is None else str(value)


def _is_la_marker(event: dict) -> bool:
    return event["eventType"] == "EVENT_TYPE_MARKER_RECORDED" and _attributes(event).get("markerName") == _LA_MARKER
