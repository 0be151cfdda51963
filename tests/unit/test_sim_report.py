"""The simulator's report: exact figures from hand-built runs, the goals' verdicts, strict JSON and the charts."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from orchestrator.simulator.report import (
    PolicyReport,
    draw_charts,
    goals,
    objective_figures,
    objectives_table,
    summarize,
    table,
    warm_pool_figures,
    warm_pool_table,
    write_json,
)
from orchestrator.simulator.results import CallRecord, PreemptionRecord, ReplicaRecord, SessionRecord, SimResult

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def run(policy: str = "berth") -> SimResult:
    """Two hours: a preloaded replica held to the end, a cold one that loaded in 30 s, one that never loaded."""
    return SimResult(
        policy=policy,
        seed=1,
        horizon_s=3600,
        end_s=7200,
        decision_seconds=0.006,
        replicas=[
            ReplicaRecord(
                "r1",
                "m",
                "n1",
                gpus=2,
                usd_per_hour=4.0,
                tier="preloaded",
                started_s=0,
                ready_s=0,
                busy_s=3600,
                preloaded=True,
            ),
            ReplicaRecord(
                "r2",
                "m",
                "n1",
                gpus=1,
                usd_per_hour=2.0,
                tier="disk",
                started_s=100,
                ready_s=130,
                ended_s=3700,
                busy_s=1800,
            ),
            ReplicaRecord("r3", "m", "n2", gpus=1, usd_per_hour=2.0, tier="origin", started_s=7000),
        ],
        sessions=[
            SessionRecord("a", arrival_s=0, ended_s=100),
            SessionRecord("a/1", arrival_s=10, ended_s=50, parent="a"),
            SessionRecord("b", arrival_s=20, ended_s=320),
            SessionRecord("c", arrival_s=30, failed="no node fits"),
            SessionRecord("d", arrival_s=40, ended_s=60),
        ],
        calls=[
            CallRecord("a", "m", 10, 5, issued_s=0, granted_s=0, first_token_s=0.5),
            CallRecord("a/1", "m", 10, 5, issued_s=10, granted_s=15, first_token_s=16, waited_for_gpu=True),
            CallRecord(
                "b", "m", 10, 5, issued_s=20, granted_s=20, served_s=20.75, first_token_s=21, waited_for_load=True
            ),  # leased at once on a loading replica: 0.75 s without a GPU
            CallRecord("b", "m", 10, 5, issued_s=200, granted_s=202, first_token_s=202.25, waited_for_gpu=True),
            CallRecord("c", "m", 10, 5, issued_s=30, waited_for_gpu=True),  # told to wait, never served
            CallRecord("d", "m", 10, 5, issued_s=40, granted_s=40, first_token_s=40.125),
        ],
        preemptions=[
            PreemptionRecord("n2", at_s=500, notice_s=30, calls_cut=2, tokens_lost=10, tokens_lost_restart=300),
            PreemptionRecord("n2", at_s=900, notice_s=30, calls_cut=1, tokens_lost=5, tokens_lost_restart=200),
        ],
        replica_samples=[(0, {"m": 1}), (100, {"m": 2}), (3700, {"m": 1}), (7000, {"m": 2})],
    )


def test_counts_and_cold_starts_include_a_replica_that_never_loaded() -> None:
    report = summarize(run())
    assert (report.policy, report.calls, report.sessions, report.failed_sessions) == ("berth", 6, 4, 1)
    assert report.cold_starts == 2
    assert report.cold_start_s == 30 + 200  # r2 loaded in 30 s; r3 held 200 s until the run's end, never ready
    assert report.calls_waited_for_load == 1
    assert report.decision_us_per_call == pytest.approx(1000.0)


def test_gpu_hours_and_cost_bill_preloaded_and_still_held_replicas() -> None:
    report = summarize(run())
    assert report.gpu_hours == pytest.approx(2 * 7200 / 3600 + 3600 / 3600 + 200 / 3600)
    assert report.cost_usd == pytest.approx(4.0 * 2 + 2.0 * 1 + 2.0 * 200 / 3600)
    assert report.gpu_utilization == pytest.approx((2 * 3600 + 1800) / (2 * 7200 + 3600 + 200))


def test_percentiles_are_nearest_rank() -> None:
    report = summarize(run())
    # TTFTs 0.125, 0.5, 1, 2.25, 6; tasks that ended 20, 100, 300 (c failed); waits 0.75 (a load), 2, 5
    # (c never granted)
    assert (report.ttft_p50_s, report.ttft_p95_s, report.ttft_p99_s) == (1.0, 6.0, 6.0)
    assert (report.task_p50_s, report.task_p95_s, report.task_p99_s) == (100, 300, 300)
    assert (report.gpu_wait_p50_s, report.gpu_wait_p95_s, report.gpu_wait_max_s) == (2, 5, 5)


def test_a_sub_agents_wait_counts_toward_its_parent_task() -> None:
    assert summarize(run()).tasks_waited == 3  # a (through a/1), b, c; d never waited
    only_sub_agent = SimResult(
        policy="berth",
        seed=1,
        horizon_s=60,
        end_s=60,
        sessions=[SessionRecord("x", arrival_s=0, ended_s=60), SessionRecord("y", arrival_s=0, ended_s=60)],
        calls=[CallRecord("x/2", "m", 1, 1, issued_s=0, granted_s=3, waited_for_gpu=True)],  # x/2 not recorded
    )
    assert summarize(only_sub_agent).tasks_waited == 1


def test_tokens_lost_sum_every_preemption() -> None:
    report = summarize(run())
    assert (report.tokens_lost, report.tokens_lost_restart, report.preemptions) == (15, 500, 2)


def test_an_empty_run_reports_none_not_zero() -> None:
    report = summarize(SimResult(policy="random", seed=0, horizon_s=0, end_s=0))
    assert report.ttft_p99_s is None and report.task_p50_s is None and report.gpu_wait_max_s is None
    assert report.gpu_utilization is None
    assert (report.gpu_hours, report.cost_usd, report.decision_us_per_call) == (0, 0, 0)


BASE = summarize(run())


def with_(**changes: object) -> PolicyReport:
    return replace(BASE, **changes)  # type: ignore[arg-type]


def test_cold_start_goal_counts_berths_cold_starts_beyond_its_first_loads() -> None:
    """Berth's first loads (30 s here) are paid by every policy, so only the seconds beyond them count."""
    spread = with_(cold_start_s=100.0)
    met = goals({"berth": with_(cold_start_s=40.0, first_load_s=30.0), "k8s-spread": spread})[0]
    assert met.met is True and "10.0×" in met.measured and "10.0 s beyond its first loads (30.0 s)" in met.measured
    assert goals({"berth": with_(cold_start_s=41.0, first_load_s=30.0), "k8s-spread": spread})[0].met is False
    free = goals({"berth": with_(cold_start_s=300.0, first_load_s=300.0), "k8s-spread": spread})[0]
    assert free.met is True and "∞" in free.measured  # more cold-start seconds than k8s-spread, all first loads
    none_to_compare = goals({"berth": with_(cold_start_s=5.0, first_load_s=0.0), "k8s-spread": with_(cold_start_s=0.0)})
    assert none_to_compare[0].met is False
    assert goals({"berth": BASE})[0].met is None


def test_gpu_hours_goal_needs_both_parts() -> None:
    warm = with_(gpu_hours=10.0, ttft_p99_s=2.0)
    met = goals({"berth": with_(gpu_hours=6.0, ttft_p99_s=3.0), "always-warm": warm})[1]
    assert met.met is True and "6.0" in met.measured and "3.00 s" in met.measured
    assert goals({"berth": with_(gpu_hours=6.5, ttft_p99_s=1.0), "always-warm": warm})[1].met is False
    assert goals({"berth": with_(gpu_hours=1.0, ttft_p99_s=3.5), "always-warm": warm})[1].met is False
    assert goals({"berth": BASE, "k8s-spread": BASE})[1].met is None


def test_tokens_goal() -> None:
    assert goals({"berth": with_(tokens_lost=10, tokens_lost_restart=100)})[2].met is True
    assert goals({"berth": with_(tokens_lost=11, tokens_lost_restart=100)})[2].met is False
    assert goals({"berth": with_(tokens_lost=0, tokens_lost_restart=100)})[2].met is True
    none = goals({"berth": with_(preemptions=0, tokens_lost=0, tokens_lost_restart=0)})[2]
    assert none.met is None and none.measured == "no preemptions in this run"
    # Reclaims that cut no running step (Berth kept its work off those nodes) prove nothing either way.
    missed = goals({"berth": with_(preemptions=3, tokens_lost=0, tokens_lost_restart=0)})[2]
    assert missed.met is None and missed.measured == "3 preemption(s), none under a running step"


def test_without_a_berth_run_no_goal_can_be_judged() -> None:
    assert [g.met for g in goals({"k8s-spread": BASE})] == [None, None, None]


def reject(constant: str) -> None:
    raise ValueError(f"non-JSON constant {constant}")


def test_json_is_strict_even_with_infinities(tmp_path: Path) -> None:
    reports = {"berth": BASE, "k8s-spread": replace(BASE, policy="k8s-spread", cold_start_s=5.0)}
    path = tmp_path / "report.json"
    write_json(
        reports,
        goals({"berth": replace(BASE, cold_start_s=0.0), "k8s-spread": reports["k8s-spread"]}),
        path,
        {"seed": 1, "ratio": math.inf, "nan": math.nan},
    )
    document = json.loads(path.read_text(encoding="utf-8"), parse_constant=reject)
    assert document["meta"] == {"seed": 1, "ratio": "inf", "nan": None}
    assert document["policies"]["berth"]["cold_start_s"] == 230
    assert document["goals"][0]["met"] is True


def test_table_has_every_policy_and_a_dash_for_missing_figures() -> None:
    empty = summarize(SimResult(policy="random", seed=0, horizon_s=0, end_s=0))
    text = table([BASE, replace(BASE, policy="always-warm", task_p50_s=1500.0), empty])
    assert all(name in text for name in ("berth", "always-warm", "random"))
    assert "–" in text and "25.0 min" in text  # the always-warm row's task p50 of 1500 s
    assert "1.00 s" in text and "230.0 s" in text  # berth's TTFT p50 and cold-start seconds


def test_three_charts_are_written(tmp_path: Path) -> None:
    results = [run(), run("k8s-spread"), SimResult(policy="random", seed=0, horizon_s=0, end_s=0)]
    paths = draw_charts(results, [summarize(r) for r in results], tmp_path / "charts")
    assert [p.name for p in paths] == ["ttft.png", "gpu_hours.png", "replicas.png"]
    for path in paths:
        assert path.read_bytes()[:8] == PNG_MAGIC and path.stat().st_size > 1000


def test_importing_the_report_does_not_load_matplotlib() -> None:
    code = "import sys, orchestrator.simulator.report; print('matplotlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_recent_cold_starts_count_only_models_called_in_the_hour_before() -> None:
    """A cold start on a model first called now is not a keep-alive's miss; one on a model called 30 min
    earlier is; one after two quiet hours is not."""
    calls = [
        CallRecord("a", "m", 10, 5, issued_s=0, cold_start=True),  # the model's first call
        CallRecord("b", "m", 10, 5, issued_s=1800, cold_start=True),  # called 30 min before: a miss
        CallRecord("c", "m", 10, 5, issued_s=9000, cold_start=True),  # 2 h quiet before it
        CallRecord("d", "m", 10, 5, issued_s=9010),
        CallRecord("e", "other", 10, 5, issued_s=9020, cold_start=True),
    ]  # its first call
    result = SimResult(policy="berth", seed=0, horizon_s=10_000, end_s=10_000, calls=calls)
    assert summarize(result).recent_cold_start_share == pytest.approx(1 / 5)


def test_warm_pool_figures_against_the_runs_baselines_with_their_goals() -> None:
    """Cold-start seconds beyond the first loads are absolute, bounded by a fifth of k8s-spread's cold-start
    seconds; the other figures are ratios to the baselines and a share of calls."""
    spread = with_(cold_start_s=100.0, first_load_s=100.0, gpu_hours=10.0)
    warm = with_(ttft_p99_s=2.0)
    berth = with_(cold_start_s=40.0, first_load_s=25.0, gpu_hours=7.0, ttft_p99_s=2.2, recent_cold_start_share=0.02)
    reports = {"berth": berth, "k8s-spread": spread, "always-warm": warm}
    figures = warm_pool_figures(berth, reports)
    assert [(f.value, f.goal, f.met) for f in figures] == [
        (15.0, 20.0, True),
        (pytest.approx(0.7), 0.6, False),
        (pytest.approx(1.1), 1.2, True),
        (0.02, 0.01, False),
    ]
    assert warm_pool_figures(spread, reports)[0].value == 0  # it only ever paid first loads
    alone = warm_pool_figures(berth, {"berth": berth})
    assert [(f.value, f.met) for f in alone][:3] == [(15.0, None), (None, None), (None, None)]
    printed = warm_pool_table(reports)
    assert "15.0 s ✓" in printed and "0.70 ✗" in printed and "2.00% ✗" in printed


def test_first_loads_are_each_models_first_cold_replica_and_show_before_the_seconds_beyond_them() -> None:
    """The floor no policy on empty disks goes under: m's first load (40 s, not its later 10 s reload) and
    other's (25 s); a preloaded replica is no load at all."""
    replicas = [
        ReplicaRecord(
            "p", "m", "n1", gpus=1, usd_per_hour=1.0, tier="preloaded", started_s=0, ready_s=0, preloaded=True
        ),
        ReplicaRecord("b", "m", "n2", gpus=1, usd_per_hour=1.0, tier="disk", started_s=500, ready_s=510),
        ReplicaRecord("a", "m", "n1", gpus=1, usd_per_hour=1.0, tier="origin", started_s=100, ready_s=140),
        ReplicaRecord("c", "other", "n1", gpus=1, usd_per_hour=1.0, tier="origin", started_s=50, ready_s=75),
    ]
    report = summarize(SimResult(policy="berth", seed=0, horizon_s=1000, end_s=1000, replicas=replicas))
    assert (report.cold_start_s, report.first_load_s) == (75.0, 65.0)
    printed = warm_pool_table({"berth": report, "k8s-spread": with_(policy="k8s-spread", cold_start_s=130.0)})
    berth_row = next(line for line in printed.splitlines() if line.startswith("berth"))
    assert re.split(r"\s{2,}", berth_row)[1:3] == ["65.0 s", "10.0 s ✓"]  # 75 - 65 s, under a fifth of 130 s


def test_objective_figures_put_attainment_first_then_gpu_hours_and_task_latency() -> None:
    """Points of SLO attainment below always-warm's, GPU-hours and task p95 over k8s-spread's, each against its
    goal; the table adds the multiple of the workload's physical floor."""
    spread = with_(gpu_hours=10.0, task_p95_s=100.0, slo_attainment=0.98)
    warm = with_(slo_attainment=0.999)
    berth = with_(gpu_hours=5.0, task_p95_s=120.0, slo_attainment=0.985, floor_gpu_hours=2.5)
    reports = {"berth": berth, "k8s-spread": spread, "always-warm": warm}
    assert [(f.value, f.goal, f.met) for f in objective_figures(berth, reports)] == [
        (pytest.approx(1.4), 1.0, False),
        (pytest.approx(0.5), 0.6, True),
        (pytest.approx(1.2), 1.1, False),
    ]
    assert [f.value for f in objective_figures(berth, {"berth": berth})] == [None, None, None]
    printed = objectives_table(reports)
    assert "98.50%" in printed and "1.40 ✗" in printed and "0.50 ✓" in printed and "2.00" in printed


def test_attainment_counts_a_call_within_both_objectives_and_never_a_batch_call() -> None:
    def call(ttft: float, seconds: float, output: int, service_class: str = "interactive") -> CallRecord:
        return CallRecord(
            "s", "m", 100, output, 0.0, first_token_s=ttft, done_s=ttft + seconds, service_class=service_class
        )

    calls = [call(0.5, 0.49, 50), call(1.5, 0.1, 50), call(0.5, 5.0, 50), call(9.0, 9.0, 9, "batch"), call(0.2, 0, 1)]
    result = SimResult("berth", 0, 10.0, 10.0, calls=calls)
    report = summarize(result)
    assert report.slo_attainment == pytest.approx(2 / 4)  # on time and fast; late; slow per token; a one-token answer
