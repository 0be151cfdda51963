"""Berth's metrics as a Prometheus scrape sees them, with a series of every instrument Berth declares.

What deploy/ reads from Prometheus (the alert rules, the Grafana dashboard) must name metrics as the
OpenTelemetry exporter really writes them (a counter gains `_total`, a histogram is `_bucket`, `_sum` and
`_count`), so the checks read the real exposition text rather than the instruments' names. A counter or
histogram appears there only once something is recorded, and a gauge only when its reading has figures:
`exposition` gives each one a figure first, through the same functions Berth records with.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from activities.step import call_metrics, task_metrics, tool_metrics
from orchestrator.node import metrics as node_metrics
from orchestrator.pool import metrics as pool_metrics
from orchestrator.reconcile import metrics as reconcile_metrics
from orchestrator.telemetry import fleet_gauges, task_gauges
from orchestrator.telemetry.metrics_setup import metrics_text
from sdk import Message, Spend, TaskState, TaskStatus
from sdk.wire.lease import LeaseRequest, Wait
from sdk.wire.ledger import LedgerEntry
from sdk.wire.task_events import Interruption

ROOT = Path(__file__).resolve().parents[2]
CODE_DIRS = ("orchestrator", "activities", "sdk", "workflows")
# Readings are cumulative over a test session: what is recorded here carries a model of its own.
MODEL = "exposition-check"
_DECLARED = re.compile(r"""create_\w+\(\s*["'](berth_\w+)["']""")


def declared_instruments() -> set[str]:
    """Every berth_* instrument the code declares (`meter.create_…("berth_…")`), so that a new one cannot
    slip past the checks: `exposition` must then be taught to give it a figure."""
    return {
        name
        for package in CODE_DIRS
        for path in (ROOT / package).rglob("*.py")
        for name in _DECLARED.findall(path.read_text(encoding="utf-8"))
    }


def _record_one_of_each() -> None:
    call_metrics.record_settled_call(
        LedgerEntry(
            task_id="t-exposition",
            step=1,
            attempt=1,
            model=MODEL,
            prompt_tokens=10,
            completion_tokens=20,
            cost_usd=0.01,
            ttft_s=0.2,
            duration_s=1.0,
            served_by="n1",
        ),
        "acme",
    )
    out_of_budget = TaskState(
        task_id="t-exposition",
        agent="a",
        agent_version="1",
        model=MODEL,
        tenant="acme",
        status=TaskStatus.out_of_budget,
        step=1,
        max_steps=2,
        spend=Spend(token_limit=10, tokens_used=10),
    )
    task_metrics.record_state_change(out_of_budget, Interruption(kind="spot_reclaim", node_id="n1", resume_s=4.0))
    task_metrics.record_task_ended(out_of_budget)
    tool_metrics.record_tool_calls(
        out_of_budget, [Message(role="tool", tool_call_id="c1", name="lookup", content="tool error: lookup failed")]
    )
    pool_metrics.record_decision(
        LeaseRequest(task_id="t-exposition", step=1, model=MODEL, tokens=10),
        Wait(reason="full", wait_reason="no_capacity", queue_position=1),
        0.001,
    )
    pool_metrics.record_grant(MODEL, "disk", waited_s=2.0, cold_start=True)
    pool_metrics.record_judgement(MODEL, "interactive", met=False)
    node_metrics.record_fetch(MODEL, "origin", size_bytes=1024, seconds=1.0)
    node_metrics.record_load(MODEL, "disk", seconds=3.0)
    reconcile_metrics.record_failures("non_deterministic_error", 3)
    reconcile_metrics.record_ended("terminated")


def exposition(monkeypatch: pytest.MonkeyPatch) -> dict[str, set[str]]:
    """Each berth_* metric family in the process's /metrics text, with the sample names it is scraped as.

    Needs the test process's MeterProvider (the `metrics_reader` fixture); the gauges' readings are
    monkeypatched for the calling test only."""
    monkeypatch.setattr(
        task_gauges,
        "_read",
        lambda: task_gauges.TaskReading(
            heartbeat_age_s={("n1", "east"): 3.0},
            gpu_trouble=Counter({(MODEL, "crash_loop"): 1}),
            near_budget=Counter({"acme": 1}),
            stuck=Counter({"acme": 1}),
        ),
    )
    monkeypatch.setattr(
        fleet_gauges,
        "_read",
        lambda: fleet_gauges.FleetReading(
            gpus=[fleet_gauges.GpuReading("n1", "east", 0, "H100-80GB", 1024, 81920, 50, 0, True)],
            replicas=Counter({(MODEL, "warm", "n1", "east"): 1}),
        ),
    )
    monkeypatch.setattr(pool_metrics, "_depth", lambda: {MODEL: (1, 5.0)})
    monkeypatch.setattr(pool_metrics, "_attainment", lambda: {(MODEL, "interactive"): (0.9, 0.99)})
    _record_one_of_each()
    families = text_string_to_metric_families(metrics_text().decode())
    return {f.name: {s.name for s in f.samples} for f in families if f.name.startswith("berth_")}
