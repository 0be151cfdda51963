"""The overview's figures: what an operator glances at to know whether the fleet keeps up.

GPUs and replicas are counted from the same fleet reading the control plane's /metrics gauges
observe (telemetry.fleet_gauges), so the page and a dashboard agree.

Task figures are the caller's tenant's when its key is confined to one; fleet figures
(GPUs, replicas) are the shared fleet's, which every role may see, with no task or tenant in them.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from sdk import TaskState, TaskStatus
from sdk.wire.fleet import UNADMITTED
from sdk.wire.task_events import InterruptionEvent, ModelCallEvent, events_of

from ..store import Store
from ..telemetry.fleet_gauges import fleet_reading
from ..telemetry.model_figures import ModelFigures, is_cold_start, model_figures
from .charts import Series

HOUR = timedelta(hours=1)
# The rate the Tokens/min card says: an average over a few minutes, so a task that just finished does not read 0.
RECENT_RATE = timedelta(minutes=5)
WAITING_SHOWN = 50


@dataclass
class Overview:
    tasks_by_state: dict[str, int]
    tokens_per_minute: Series
    tokens_per_minute_recent: float
    calls_1h: int
    usd_1h: float
    gpus_busy: int
    gpus_idle: int
    warm_replicas: int
    loading_replicas: int
    cold_starts_1h: int
    preemptions_1h: int
    waiting_for_gpu: list[TaskState] = field(default_factory=list)


def overview(store: Store, tenant: str | None, now: datetime | None = None, since: datetime | None = None) -> Overview:
    """The cards (the last hour's figures) and the tokens a minute from `since` (the chart's window; the hour)."""
    now = now or datetime.now(UTC)
    per_minute = store.ledger.tokens_per_minute(min(since or now - HOUR, now - HOUR), tenant)
    recent = store.events.recent((ModelCallEvent.KIND, InterruptionEvent.KIND), now - HOUR, tenant)
    calls = events_of(ModelCallEvent, recent)
    fleet = fleet_reading(n for n in store.fleet.list() if n.status != "lost" and n.status not in UNADMITTED)
    replicas: Counter[str] = Counter()
    for (_model, state, _node, _datacenter), count in fleet.replicas.items():
        replicas[state] += count
    return Overview(
        tasks_by_state=_ordered(store.tasks.count_by_status(tenant)),
        tokens_per_minute=Series("tokens/min", [(at, float(n)) for at, n in per_minute]),
        tokens_per_minute_recent=recent_rate(per_minute, now),
        calls_1h=len(calls),
        usd_1h=sum(c.data.cost_usd for c in calls),
        gpus_busy=sum(1 for g in fleet.gpus if g.held),
        gpus_idle=sum(1 for g in fleet.gpus if not g.held),
        warm_replicas=replicas["warm"],
        loading_replicas=replicas["loading"],
        cold_starts_1h=sum(1 for c in calls if is_cold_start(c)),
        preemptions_1h=len(events_of(InterruptionEvent, recent)),
        waiting_for_gpu=_waiting_for_gpu(store, tenant),
    )


def recent_rate(per_minute: list[tuple[datetime, int]], now: datetime) -> float:
    """Tokens a minute over the last RECENT_RATE, the current minute counted for the part of it gone by."""
    since = now - RECENT_RATE
    tokens = sum(n for at, n in per_minute if at + timedelta(minutes=1) > since)
    return tokens / (RECENT_RATE.total_seconds() / 60)


def models_last_hour(store: Store, now: datetime | None = None) -> dict[str, ModelFigures]:
    """Each model's calls, cold starts, TTFT and speed over the last hour, across the fleet (no task in them)."""
    return models_in_window(store, (now or datetime.now(UTC)) - HOUR)


def models_in_window(store: Store, since: datetime) -> dict[str, ModelFigures]:
    """Each model's calls, cold starts, TTFT and speed since `since` (a page's window), across the fleet."""
    return model_figures(events_of(ModelCallEvent, store.events.recent((ModelCallEvent.KIND,), since)))


def _waiting_for_gpu(store: Store, tenant: str | None) -> list[TaskState]:
    """Tasks the fleet cannot serve right now; each says why (capacity, a preemption, a crash-looping replica)."""
    return store.tasks.list(tenant=tenant, status=TaskStatus.waiting_for_gpu.value, limit=WAITING_SHOWN)


def _ordered(counts: dict[str, int]) -> dict[str, int]:
    """Every status, in the order a task goes through them, zeros included (a zero is news too)."""
    return {status.value: counts.get(status.value, 0) for status in TaskStatus}
