"""Berth's alert rules (deploy/helm/berth/files/berth-alerts.yml, the one copy: the chart's PrometheusRule and
compose's Prometheus load it) judged by Prometheus's own tool: `promtool check rules` (the rules parse and their
PromQL is valid) and `promtool test rules` over deploy/prometheus/berth-alerts.test.yml, series in, alerts out: each
alert fires when it should, with the figures its summary quotes, and stays quiet when it should; behind two
control-plane replicas a gauge of the shared store is not counted twice.

promtool is Debian's `prometheus` package, which `make test` installs (the Makefile's system-packages). Without
it this fails, never skips: a check that quietly does not run is the kind of silence these rules are for.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
RULES = DEPLOY / "helm" / "berth" / "files" / "berth-alerts.yml"
RULE_TESTS = DEPLOY / "prometheus" / "berth-alerts.test.yml"
# What on-call is paged for (issue 35): the alerts that must exist, and have a test case each.
ON_CALL_ALERTS = {
    "BerthTaskFailureRateHigh",
    "BerthWorkflowTasksFailing",
    "BerthControlPlaneTargetDown",
    "BerthNodeTargetDown",
    "BerthControlPlaneMetricsAbsent",
    "BerthWorkerMetricsAbsent",
    "BerthTaskStuck",
}


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    tool = shutil.which("promtool")
    if tool is None:
        pytest.fail("promtool is missing: `make test` installs it (or: apt-get install prometheus)", pytrace=False)
    # From the tests' directory: the test file names the rules relative to itself.
    return subprocess.run(
        [tool, *args], cwd=RULE_TESTS.parent, capture_output=True, text=True, timeout=120, check=False
    )


def test_promtool_finds_the_rules_valid() -> None:
    checked = promtool("check", "rules", str(RULES))
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_alert_rules_pass_their_promtool_tests() -> None:
    tested = promtool("test", "rules", RULE_TESTS.name)
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_the_tests_load_the_one_copy_of_the_rules() -> None:
    (rule_file,) = yaml.safe_load(RULE_TESTS.read_text())["rule_files"]
    assert (RULE_TESTS.parent / rule_file).resolve() == RULES


def test_every_on_call_alert_exists_and_is_tested() -> None:
    rules = {r["alert"] for group in yaml.safe_load(RULES.read_text())["groups"] for r in group["rules"]}
    tested = {
        case["alertname"]
        for group in yaml.safe_load(RULE_TESTS.read_text())["tests"]
        for case in group.get("alert_rule_test", [])
        if case.get("exp_alerts")
    }
    assert ON_CALL_ALERTS <= rules, ON_CALL_ALERTS - rules
    assert ON_CALL_ALERTS <= tested, f"no test case sees these fire: {sorted(ON_CALL_ALERTS - tested)}"
