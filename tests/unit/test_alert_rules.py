"""deploy/prometheus/berth-alerts.yml: well formed, and every metric an alert reads is one Berth exposes."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest
import yaml
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from prometheus_client.parser import text_string_to_metric_families

from orchestrator.pool import metrics as pool_metrics
from orchestrator.telemetry import fleet_gauges, task_gauges
from orchestrator.telemetry.metrics_setup import metrics_text

RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus" / "berth-alerts.yml"
ISSUE_ALERTS = {"BerthGpuEccErrors", "BerthReplicaCrashLooping", "BerthTasksWaitingForGpu", "BerthTenantNearBudget",
                "BerthNodeMissingHeartbeats"}


def test_every_alert_reads_metrics_berth_exposes(metrics_reader: InMemoryMetricReader,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # A reading of each gauge, so that the exposition has a series of every one of them.
    monkeypatch.setattr(task_gauges, "_read", lambda: task_gauges.TaskReading(
        heartbeat_age_s={("n1", "east"): 3.0}, gpu_trouble=Counter({("m", "crash_loop"): 1}),
        near_budget=Counter({"acme": 1})))
    monkeypatch.setattr(fleet_gauges, "_read", lambda: fleet_gauges.FleetReading(
        gpus=[fleet_gauges.GpuReading("n1", "east", 0, "H100-80GB", 1024, 81920, 50, 0, True)]))
    monkeypatch.setattr(pool_metrics, "_depth", lambda: {"m": (1, 5.0)})
    exposed = {s.name for f in text_string_to_metric_families(metrics_text().decode()) for s in f.samples}

    rules = [r for group in yaml.safe_load(RULES.read_text())["groups"] for r in group["rules"]]
    assert ISSUE_ALERTS <= {r["alert"] for r in rules}
    for rule in rules:
        assert rule["labels"]["severity"] in {"critical", "warning", "info"} and rule["annotations"]["summary"]
        read = set(re.findall(r"\bberth_[a-z_]+\b", rule["expr"]))
        assert read and read <= exposed, (rule["alert"], read - exposed)
