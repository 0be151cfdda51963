"""What a task's recorded state changes add to the metrics: its end by outcome, budget exhaustion, preemptions.

Recorded by the `record_state` activity, never by the workflow: workflow code is replayed, and a metric
recorded there would count again on every replay. A local activity retried after a lost reply may count an
event twice; a metric is a rate to watch, the event log is the record. Labels never name the task.

A task's end is the exception, counted exactly once: by whoever's write moved its row from unfinished to final
(the store answers that in the same UPDATE, so a retried activity, a restarted worker or a second control-plane
replica writing the same end is told it did not end it). The orchestrator worker counts the ends its workflows
record, the control plane's reconciler those of workflows that ended in Temporal without recording one; each
end is counted in one process only, so a sum over every instance is the fleet's count.
"""

from __future__ import annotations

from opentelemetry import metrics
from pydantic import BaseModel

from sdk import TaskState, TaskStatus
from sdk.wire.task_events import Interruption

from .call_metrics import LATENCY_BUCKETS_S

# A budget runs out when the task waits for a raise (awaiting_budget) or ends without one (out_of_budget).
BUDGET_EXHAUSTED = frozenset({TaskStatus.awaiting_budget, TaskStatus.out_of_budget})

_meter = metrics.get_meter("berth.activities.task")
_budget_exhausted = _meter.create_counter(
    "berth_budget_exhausted",
    unit="{event}",
    description="tasks whose budget ran out, by status (awaiting_budget: waits for a raise; out_of_budget: ended)",
)
_ended = _meter.create_counter(
    "berth_tasks_ended",
    unit="{task}",
    description="tasks that reached a final status, by outcome (completed, failed, cancelled, out_of_budget,"
    " max_steps), tenant, agent and model; each counted once, where its end is written to the store",
)
_preemptions = _meter.create_counter(
    "berth_preemptions", unit="{interruption}", description="steps cut off by an interruption of their node, by kind"
)
_resume = _meter.create_histogram(
    "berth_resume_seconds",
    unit="s",
    description="from an interruption to the step's new placement",
    explicit_bucket_boundaries_advisory=LATENCY_BUCKETS_S,
)


def record_state_change(state: TaskState, event: BaseModel) -> None:
    """Count a budget exhaustion or an interruption (`event`: the data of the event recorded with the state)."""
    if state.status in BUDGET_EXHAUSTED:
        _budget_exhausted.add(1, {"tenant": state.tenant, "model": state.model, "status": state.status.value})
    if isinstance(event, Interruption):
        labels = {"model": state.model, "kind": event.kind, "node": event.node_id or ""}
        _preemptions.add(1, labels)
        if event.resume_s is not None:
            _resume.record(event.resume_s, labels)


def record_task_ended(state: TaskState) -> None:
    """Count a task's end; call it only where the store said this write ended it (`save_state`'s answer)."""
    if state.status.is_final:
        labels = {"outcome": state.status.value, "tenant": state.tenant, "agent": state.agent, "model": state.model}
        _ended.add(1, labels)
