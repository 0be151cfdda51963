"""deploy/grafana/berth-dashboard.json: a Grafana dashboard whose every query reads metrics Berth exposes.

A dashboard fails silently: a panel whose query names a metric nobody exports just says "No data". So
each query's berth_* names are checked against the real /metrics text (as the alert rules are), the
PromQL shapes that would be wrong on a scrape's types are refused (a rate of a gauge, a quantile without
`le`), and every metric Berth declares is on the dashboard or listed below with the reason it is not.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from prometheus_client.parser import text_string_to_metric_families

from orchestrator.telemetry.metrics_setup import metrics_text
from tests.unit.metrics_exposition import declared_instruments, exposition

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "berth-dashboard.json"
DATASOURCE = "${datasource}"
METRIC = re.compile(r"\bberth_[a-z0-9_]+\b")
TEMPORAL_METRIC = re.compile(r"\btemporal_[a-z0-9_]+\b")
# The dashboard's filters: a query of a metric that carries one of these labels narrows by its variable.
FILTERS = ("model", "tenant", "node")
# Sample names a rate() or increase() may read: counters and histograms' parts, never a gauge.
MONOTONIC = ("_total", "_bucket", "_sum", "_count")
RANGES = {"$__rate_interval", "$__range"}
# Metric families deliberately left off the dashboard, with the reason; empty while it shows them all.
NOT_ON_THE_DASHBOARD: dict[str, str] = {}

Panel = dict[str, Any]


def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def all_panels(panels: list[Panel]) -> Iterator[Panel]:
    """Every panel, rows included, and the panels a collapsed row holds inside it."""
    for panel in panels:
        yield panel
        yield from all_panels(panel.get("panels", []))


def queries() -> Iterator[tuple[str, str]]:
    """(panel title, PromQL expression) of every target on the dashboard."""
    for panel in all_panels(dashboard()["panels"]):
        for target in panel.get("targets", []):
            yield panel["title"], target["expr"]


def test_the_dashboard_picks_its_prometheus_and_shows_the_last_six_hours() -> None:
    board = dashboard()
    assert board["title"] and board["uid"] and isinstance(board["schemaVersion"], int) and board["schemaVersion"] >= 36
    assert board["time"] == {"from": "now-6h", "to": "now"} and board["refresh"] == "30s"
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"


def test_every_panel_has_a_title_a_place_and_queries_on_the_chosen_datasource() -> None:
    panels = list(all_panels(dashboard()["panels"]))
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)
    assert {p["title"] for p in panels if p["type"] == "row"} >= {"Fleet", "Models", "Tasks and budgets"}
    for panel in panels:
        where = panel.get("title") or panel["id"]
        place = panel["gridPos"]
        assert all(isinstance(place[k], int) for k in ("h", "w", "x", "y")), where
        assert place["w"] > 0 and place["h"] > 0 and place["x"] + place["w"] <= 24, where
        assert panel["title"], where
        if panel["type"] == "row":
            continue
        assert panel["type"] in {"timeseries", "stat"}, where
        assert panel["description"] and panel["fieldConfig"]["defaults"]["unit"], where
        assert panel["datasource"]["uid"] == DATASOURCE, where
        targets = panel["targets"]
        assert targets and len({t["refId"] for t in targets}) == len(targets), where
        for target in targets:
            assert target["datasource"]["uid"] == DATASOURCE and target["expr"].strip(), where


def test_every_query_reads_metrics_berth_exposes(
    metrics_reader: InMemoryMetricReader, monkeypatch: pytest.MonkeyPatch
) -> None:
    exposed = {name for samples in exposition(monkeypatch).values() for name in samples}
    for title, expr in queries():
        read = set(METRIC.findall(expr))
        assert read <= exposed, (title, read - exposed)
        # Temporal's worker metrics are the worker's alone: tests/system/test_metrics_scrape.py finds them there.
        assert read or TEMPORAL_METRIC.search(expr), (title, expr)
        for opener, closer in ("()", "[]", "{}"):
            assert expr.count(opener) == expr.count(closer), (title, expr)
        for name in re.findall(r"\b(?:rate|irate|increase)\(\s*(berth_[a-z0-9_]+)", expr):
            assert name.endswith(MONOTONIC), (title, f"a rate of {name}, which is no counter")
        assert set(re.findall(r"\[([^\]]+)\]", expr)) <= RANGES, (title, expr)
        if any(name.endswith("_bucket") for name in read):
            assert "histogram_quantile(" in expr and re.search(r"by \([^)]*\ble\b", expr), (title, expr)


def test_every_metric_berth_declares_is_on_the_dashboard(
    metrics_reader: InMemoryMetricReader, monkeypatch: pytest.MonkeyPatch
) -> None:
    families = exposition(monkeypatch)
    # The exposition has a series of every instrument the code declares, or this check would miss a new one.
    unseen = declared_instruments() - families.keys()
    assert not unseen, f"declared but given no figure by metrics_exposition.exposition: {sorted(unseen)}"
    assert NOT_ON_THE_DASHBOARD.keys() <= families.keys()
    shown = {name for _title, expr in queries() for name in METRIC.findall(expr)}
    missing = {
        family for family, samples in families.items() if family not in NOT_ON_THE_DASHBOARD and not samples & shown
    }
    assert not missing, f"not on the dashboard (add a panel, or a reason to NOT_ON_THE_DASHBOARD): {sorted(missing)}"


def test_the_model_tenant_and_node_filters_are_multi_value_variables() -> None:
    variables = {v["name"]: v for v in dashboard()["templating"]["list"]}
    for name in FILTERS:
        variable = variables[name]
        assert variable["type"] == "query" and variable["datasource"]["uid"] == DATASOURCE, name
        assert variable["query"]["query"] == f"label_values({name})", name
        # "All" must match a series without the label too (.* matches the empty value), or a panel of a metric
        # that lacks it would go blank.
        assert variable["multi"] and variable["includeAll"] and variable["allValue"] == ".*", name


def test_every_query_narrows_by_each_filter_its_metrics_carry(
    metrics_reader: InMemoryMetricReader, monkeypatch: pytest.MonkeyPatch
) -> None:
    exposition(monkeypatch)
    labels: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(metrics_text().decode()):
        for sample in family.samples:
            labels.setdefault(sample.name, set()).update(sample.labels)
    for title, expr in queries():
        for selector in re.finditer(r"\b(berth_[a-z0-9_]+)(\{[^}]*\})?", expr):
            name, matchers = selector.group(1), selector.group(2) or ""
            for label in FILTERS:
                if label in labels[name]:
                    assert f'{label}=~"${label}"' in matchers, (title, name, label)
