"""The reconciler's counters; the gauge of tasks stuck now is read from the store when scraped
(orchestrator.telemetry.task_gauges), so every control-plane replica reports it, not only the one that sweeps."""

from __future__ import annotations

from opentelemetry import metrics

_meter = metrics.get_meter("berth.reconcile")
_failures = _meter.create_counter(
    "berth_workflow_task_failures",
    unit="{failure}",
    description="failed attempts of tasks' workflow tasks the control plane has seen, by Temporal's cause"
    " (each counted once, however many rounds see it)",
)
_ended = _meter.create_counter(
    "berth_tasks_ended_in_temporal",
    unit="{task}",
    description="tasks whose workflow ended in Temporal without writing its final state (terminated, failed,"
    " timed out, cancelled), which the control plane then wrote, by how",
)


def record_failures(cause: str, count: int) -> None:
    if count > 0:
        _failures.add(count, {"cause": cause})


def record_ended(how: str) -> None:
    _ended.add(1, {"how": how})
