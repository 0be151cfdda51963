"""What the dashboard and the alert rules read is what Berth's processes really serve: a `berth up` with one
simulated GPU node runs a task, then the API's, the orchestrator worker's and the node agent's /metrics are
scraped over HTTP, and every metric name in every dashboard query and alert expression must be in a scrape
(a histogram's _bucket, _sum and _count are its samples), unless it is one of the few that only an event this
test does not cause writes (EVENT_ONLY, each with that event; the unit tests give those a figure in-process).

The unit checks (tests/unit/test_grafana_dashboard.py, test_alert_rules.py) read an in-process exposition;
this one catches what only the real processes decide: which process serves what, that Temporal's worker metrics
reach the worker's port, that the API reports its task gauges at 0 rather than not at all.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from sdk import Budget, SyncClient, TaskStatus
from tests.conftest import ROOT
from tests.system.conftest import Stack, fleet_stack

pytestmark = pytest.mark.system

DASHBOARD = ROOT / "deploy" / "grafana" / "berth-dashboard.json"
RULES = ROOT / "deploy" / "helm" / "berth" / "files" / "berth-alerts.yml"
NODE = {"node_id": "scrape-a", "datacenter": "east", "zone": "east-1a", "capacity": "on-demand", "gpus": "1xH100-80GB"}
# Written only when something this test does not do happens (a counter or histogram appears with its first record).
EVENT_ONLY = {
    "berth_budget_exhausted_total": "a task's budget running out",
    "berth_preemptions_total": "a node interrupting a step",
    "berth_resume_seconds_bucket": "a step placed again after an interruption",
    "berth_weights_fetched_bytes_total": "real weights fetched (simulated nodes fetch none)",
    "berth_weights_fetch_seconds_bucket": "real weights fetched (simulated nodes fetch none)",
    "berth_workflow_task_failures_total": "the reconciler finding a stuck task",
    "berth_tasks_ended_in_temporal_total": "a workflow ended in Temporal without writing its end",
    "berth_tool_call_failures_total": "a tool call failing",
    "berth_gpu_wait_seconds_bucket": "a step that queued for a GPU (a cold start waits without queuing)",
    # Reported while the pool's last minute holds judged grants: this task's may be older by the scrape.
    "berth_slo_attainment_ratio": "a grant with latency objectives in the last minute",
    "berth_slo_attainment_target_ratio": "a grant with latency objectives in the last minute",
    "berth_gpu_wait_answers_total": "the pool answering a step 'wait' (a cold start is granted a loading replica)",
}
# PromQL words that are not metric names: operators, modifiers, aggregation clauses.
KEYWORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset"}
# Prometheus's own series, which no process serves.
SYNTHETIC = {"up"}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads: identifiers that are not functions (followed by "("), keywords,
    label names (inside {...} or a by/without/on clause), strings, ranges or numbers."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # strings, which may hold anything
    expr = re.sub(r"\{[^}]*\}", "", expr)  # label matchers
    expr = re.sub(r"\[[^\]]*\]", "", expr)  # ranges
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", expr)
    return {
        m.group(1)
        for m in re.finditer(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\b(?!\s*\()", expr)
        if m.group(1) not in KEYWORDS and not m.group(1).startswith("$")
    } - {"e", "inf", "nan", "Inf", "NaN"}


def test_metric_names_are_read_from_promql() -> None:
    expr = 'histogram_quantile(0.95, sum by (model, le) (rate(berth_x_bucket{model=~"$model"}[$__rate_interval])))'
    assert metric_names(expr) == {"berth_x_bucket"}
    assert metric_names('sum by (t) (a_total{o="f"}) / on (t) b and up{job=~"x"} == 0 or vector(0)') == {
        "a_total",
        "b",
        "up",
    }


def _panels(panels: list[dict]) -> Iterator[dict]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))


def read_by_deploy() -> dict[str, set[str]]:
    """metric name -> where it is read (a panel's title, an alert's name)."""
    read: dict[str, set[str]] = {}
    board = json.loads(DASHBOARD.read_text())
    exprs = [(p["title"], t["expr"]) for p in _panels(board["panels"]) for t in p.get("targets", [])]
    rules = yaml.safe_load(RULES.read_text())["groups"]
    exprs += [(r["alert"], r["expr"]) for g in rules for r in g["rules"]]
    for where, expr in exprs:
        for name in metric_names(expr):
            read.setdefault(name, set()).add(where)
    return read


def scrape(url: str, key: str | None = None) -> dict[str, list]:
    """sample name -> its samples, from one /metrics over HTTP."""
    headers = {"authorization": f"Bearer {key}"} if key else {}
    response = httpx.get(url, headers=headers, timeout=10)
    assert response.status_code == 200, (url, response.status_code, response.text[:300])
    samples: dict[str, list] = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append(sample)
    return samples


def metrics_urls(stack: Stack) -> dict[str, str]:
    """`berth up`'s Metrics line: the worker's and each node's /metrics address."""
    line = next(line for line in stack.log_tail().splitlines() if line.strip().startswith("Metrics"))
    return dict(re.findall(r", ([\w.-]+) (http://[\d.]+:\d+/metrics)", line))


def test_every_metric_the_dashboard_and_alerts_read_is_served(tmp_path: Path) -> None:
    with fleet_stack(tmp_path, [NODE], latency_scale=0.05, load_time_scale=0.02) as stack:
        client = SyncClient(stack.api, stack.admin_key())
        handle = client.submit(
            "research", "H100 memory", budget=Budget(30_000), task_id="scrape-1", model="llama-3.2-1b"
        )
        handle.result(timeout=120)
        assert handle.status().status == TaskStatus.completed
        urls = metrics_urls(stack)
        api = scrape(f"{stack.api}/metrics", stack.admin_key())
        worker = scrape(urls["worker"])
        node = scrape(urls[NODE["node_id"]])

    served = api.keys() | worker.keys() | node.keys()
    read = read_by_deploy()
    missing = {
        name: sorted(where) for name, where in read.items() if name not in served | SYNTHETIC | EVENT_ONLY.keys()
    }
    assert not missing, f"read by the dashboard or an alert, served by no process: {missing}"
    # Each exception is still read somewhere (a name dropped from the dashboard and the rules leaves the list).
    assert EVENT_ONLY.keys() <= read.keys(), sorted(EVENT_ONLY.keys() - read.keys())

    # Temporal's worker metrics on the worker's own port, the failure counter at 0 from the start.
    failed = worker["temporal_workflow_task_execution_failed_total"]
    assert failed and sum(s.value for s in failed) == 0
    assert "temporal_workflow_task_execution_latency_count" in worker
    # The task's end, counted once where the worker wrote it; its tool calls, where its steps were recorded.
    ended = [s for s in worker["berth_tasks_ended_total"] if s.labels["tenant"] == "default"]
    assert [(s.labels["outcome"], s.labels["agent"], s.value) for s in ended] == [("completed", "research", 1)]
    calls = {s.labels["tool"] for s in api.get("berth_tool_calls_total", []) + worker.get("berth_tool_calls_total", [])}
    assert calls and calls <= {"search", "take_note"}
    # The API's gauges of the store are there at 0 for the default tenant, not missing.
    assert {(s.labels["tenant"], s.value) for s in api["berth_tasks_stuck"]} >= {("default", 0)}
