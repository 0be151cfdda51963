"""What the alerts need from the control plane's store: nodes' heartbeat ages, tasks the fleet cannot
serve (by the trouble the workflow names), running tasks close to their budget, and tasks whose workflow is
stuck in Temporal (as the reconciler last found them).

Observable, read when scraped (like the fleet gauges): the store already holds these facts, and a
workflow, whose code is replayed, could not count them itself. A tenant's tasks near their limit are
counted, not named: labels never carry task ids.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import get_args

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Observation

from sdk import GpuTrouble, TaskState
from sdk.wire.fleet import NodeView

# A task that has used this share of its token limit is "near its budget".
NEAR_BUDGET = 0.9


@dataclass(frozen=True)
class TaskReading:
    # (node, datacenter) -> seconds since its last heartbeat (since it registered, if none yet)
    heartbeat_age_s: dict[tuple[str, str], float] = field(default_factory=dict)
    # (model, trouble) -> tasks waiting for a GPU for that reason
    gpu_trouble: Counter[tuple[str, str]] = field(default_factory=Counter)
    # tenant -> running tasks at or above NEAR_BUDGET of their token limit
    near_budget: Counter[str] = field(default_factory=Counter)
    # tenant -> unfinished tasks whose workflow task keeps failing (TaskState.stuck)
    stuck: Counter[str] = field(default_factory=Counter)


def task_reading(
    nodes: Iterable[NodeView],
    waiting: Iterable[TaskState],
    running: Iterable[TaskState],
    now: datetime | None = None,
    *,
    stuck: Mapping[str, int] | None = None,
    tenants: Iterable[str] = (),
    models: Iterable[str] = (),
) -> TaskReading:
    """`stuck`: tasks stuck now by tenant (the store's `count_stuck`). `tenants` and `models` (self-hosted): those
    the store knows, each reported at 0 where none of its tasks is counted. A gauge that vanished at zero would read
    as "no data" on a dashboard and could not tell an `absent()` alert that the figure is 0 from a scrape that
    does not reach the control plane."""
    now = now or datetime.now(UTC)
    tenants = list(tenants)
    reading = TaskReading(
        gpu_trouble=Counter(dict.fromkeys(((m, t) for m in models for t in get_args(GpuTrouble)), 0)),
        near_budget=Counter(dict.fromkeys(tenants, 0)),
        stuck=Counter({**dict.fromkeys(tenants, 0), **(stuck or {})}),
    )
    for node in nodes:
        if node.status not in ("lost", "revoked"):  # a pending node heartbeats: its silence is news too
            seen = node.last_heartbeat_at or node.registered_at
            reading.heartbeat_age_s[(node.node_id, node.datacenter)] = max(0.0, (now - seen).total_seconds())
    reading.gpu_trouble.update((t.model, t.gpu_trouble or "capacity") for t in waiting)
    reading.near_budget.update(
        t.tenant
        for t in running
        if t.spend.token_limit > 0 and t.spend.tokens_used >= NEAR_BUDGET * t.spend.token_limit
    )
    return reading


_read: Callable[[], TaskReading] = TaskReading


def watch_tasks(read: Callable[[], TaskReading]) -> None:
    """Make `read` the source of this process's task gauges (the control plane's; called once per scrape)."""
    global _read
    _read = read


def _heartbeat_ages(_options: CallbackOptions) -> Iterator[Observation]:
    for (node, datacenter), age in _read().heartbeat_age_s.items():
        yield Observation(age, {"node": node, "datacenter": datacenter})


def _troubles(_options: CallbackOptions) -> Iterator[Observation]:
    for (model, trouble), count in _read().gpu_trouble.items():
        yield Observation(count, {"model": model, "trouble": trouble})


def _near_budget(_options: CallbackOptions) -> Iterator[Observation]:
    for tenant, count in _read().near_budget.items():
        yield Observation(count, {"tenant": tenant})


def _stuck(_options: CallbackOptions) -> Iterator[Observation]:
    for tenant, count in _read().stuck.items():
        yield Observation(count, {"tenant": tenant})


_meter = metrics.get_meter("berth.tasks")
_meter.create_observable_gauge(
    "berth_node_heartbeat_age_seconds",
    [_heartbeat_ages],
    unit="s",
    description="seconds since each live node's last heartbeat",
)
_meter.create_observable_gauge(
    "berth_tasks_waiting_for_gpu",
    [_troubles],
    unit="{task}",
    description="tasks the fleet cannot serve now, by model and trouble (capacity, preemption, crash_loop)",
)
_meter.create_observable_gauge(
    "berth_tasks_near_budget",
    [_near_budget],
    unit="{task}",
    description=f"running tasks that used {NEAR_BUDGET:.0%} or more of their token limit",
)
_meter.create_observable_gauge(
    "berth_tasks_stuck",
    [_stuck],
    unit="{task}",
    description="unfinished tasks whose workflow task keeps failing in Temporal (nondeterminism, a bug, a payload"
    " that cannot be decoded), as the control plane's reconciler last found them",
)
