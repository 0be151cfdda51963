"""deploy/helm/berth/files/berth-alerts.yml: well formed, and every metric an alert reads is one Berth exposes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from tests.unit.metrics_exposition import exposition

RULES = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "berth" / "files" / "berth-alerts.yml"
ISSUE_ALERTS = {
    "BerthGpuEccErrors",
    "BerthReplicaCrashLooping",
    "BerthTasksWaitingForGpu",
    "BerthTenantNearBudget",
    "BerthNodeMissingHeartbeats",
    "BerthTaskStuck",
}


def test_every_alert_reads_metrics_berth_exposes(
    metrics_reader: InMemoryMetricReader, monkeypatch: pytest.MonkeyPatch
) -> None:
    exposed = {name for samples in exposition(monkeypatch).values() for name in samples}

    rules = [r for group in yaml.safe_load(RULES.read_text())["groups"] for r in group["rules"]]
    assert ISSUE_ALERTS <= {r["alert"] for r in rules}
    for rule in rules:
        assert rule["labels"]["severity"] in {"critical", "warning", "info"} and rule["annotations"]["summary"]
        read = set(re.findall(r"\bberth_[a-z_]+\b", rule["expr"]))
        assert read <= exposed, (rule["alert"], read - exposed)
        # Beside Berth's own: Prometheus's `up` (target down) and Temporal's worker metrics, which the worker
        # exports (their names are pinned by tests/unit/test_temporal_metrics.py).
        assert read or re.search(r"\b(up|temporal_[a-z_]+)\b", rule["expr"]), rule["alert"]
