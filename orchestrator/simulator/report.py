"""What `berth simulate` tells its reader: one row of figures per policy, the three goals, JSON and charts.

Every figure is derived from a run's records (results.py) and nothing else, so a surprising number can
be traced back to the calls, replicas and preemptions behind it. Percentiles are nearest-rank, the same
rule as the admin UI's Models page: a reported p99 is a time some call really had.
"""

from __future__ import annotations

import bisect
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.simulator.results import CallRecord, ReplicaRecord, SessionRecord, SimResult
from orchestrator.telemetry.model_figures import percentile
from sdk.wire.objectives import DEFAULT_OBJECTIVES

if TYPE_CHECKING:
    from matplotlib.figure import Figure

MISSING = "–"
RECENT_S = 3600.0

# (name, target) of each goal, in the order goals() returns them.
COLD_START_GOAL = (
    "cold-start seconds beyond each model's first load ≥10× lower than k8s-spread's cold-start seconds",
    "k8s-spread's cold-start s / berth's beyond first loads ≥ 10",
)
GPU_HOURS_GOAL = (
    "GPU-hours ≥40% lower than always-warm, p99 TTFT within 1.5× of it",
    "GPU-hours ≤ 60% of always-warm and p99 TTFT ≤ 1.5× always-warm's",
)
TOKENS_GOAL = ("tokens lost to preemption ≥10× lower than restart-from-scratch", "restart / berth ≥ 10")


@dataclass(frozen=True)
class PolicyReport:
    policy: str
    calls: int
    sessions: int  # top-level sessions: what a user submitted; sub-agents are part of their parent's task
    failed_sessions: int
    cold_starts: int
    cold_start_s: float
    ttft_p50_s: float | None
    ttft_p95_s: float | None
    ttft_p99_s: float | None
    task_p50_s: float | None
    task_p95_s: float | None
    task_p99_s: float | None
    gpu_hours: float
    cost_usd: float
    gpu_utilization: float | None
    tokens_lost: int
    tokens_lost_restart: int
    preemptions: int
    tasks_waited: int
    gpu_wait_p50_s: float | None
    gpu_wait_p95_s: float | None
    gpu_wait_max_s: float | None
    calls_waited_for_load: int
    decision_us_per_call: float
    # Calls that met a cold start (their replica became ready after they were issued) on a model that had a
    # call issued in the hour before: the cold starts a keep-alive that learns should have avoided.
    recent_cold_start_share: float = 0.0
    # Of cold_start_s, the load of each model's first replica: what no policy starting on empty disks avoids.
    first_load_s: float = 0.0
    prewarms: int = 0  # replicas the scaler started for steps that had not asked yet
    prewarms_used: int = 0  # of them, those a lease landed on
    # Of the calls with per-call latency objectives (their class's defaults, sdk/wire/objectives.py), the share
    # that met both its time to first token and its time per output token; None when no call has any.
    slo_attainment: float | None = None
    goodput_per_gpu_hour: float | None = None  # those calls per GPU-hour held (DistServe's goodput, per GPU)
    floor_gpu_hours: float = 0.0  # the workload's work at the fleet's best throughput: no policy needs less


@dataclass(frozen=True)
class Goal:
    name: str
    target: str
    measured: str
    met: bool | None  # None: the run cannot say (a policy it compares with was not run, or no data)


def _top_level_of(sessions: Sequence[SessionRecord]) -> Callable[[str], str]:
    """Maps a session id to the task it belongs to, so a sub-agent's wait counts against its parent's task.

    The parent chain is the record of truth; an id the run did not record falls back to the id
    convention (a sub-agent's id is its parent's id, "/", and more).
    """
    parents = {s.session_id: s.parent for s in sessions}

    def top(session_id: str) -> str:
        if session_id not in parents:
            return session_id.split("/", 1)[0]
        while (parent := parents.get(session_id)) is not None:
            session_id = parent
        return session_id

    return top


def summarize(result: SimResult) -> PolicyReport:
    """One policy's figures from one run's records."""
    end_s = result.end_s
    cold = [r for r in result.replicas if not r.preloaded]
    # A replica that never became ready held its GPUs loading until it ended (or the run did).
    cold_start_s = sum(r.load_s if r.load_s is not None else r.held_s(end_s) for r in cold)
    held_gpu_s, held_usd = _held_gpus(result.replicas, end_s)
    # Utilization stays per replica: the share of the GPU time each replica held that it spent generating.
    busy_gpu_s = sum(r.gpus * r.busy_s for r in result.replicas)
    replica_gpu_s = sum(r.gpus * r.held_s(end_s) for r in result.replicas)

    tasks = [s for s in result.sessions if s.parent is None]
    task_s = sorted(s.ended_s - s.arrival_s for s in tasks if s.failed is None and s.ended_s is not None)
    ttft = sorted(t for c in result.calls if (t := c.ttft_s) is not None)
    # Waiting for a GPU: told to wait for a lease, or leased on a replica still loading. A call told to
    # wait that never got a lease has no wait time to report (gpu_wait_s would say 0).
    waited = [c for c in result.calls if c.waited_for_gpu or c.waited_for_load]
    waits = sorted(c.gpu_wait_s for c in waited if c.granted_s is not None)
    top = _top_level_of(result.sessions)
    waited_tasks = {top(c.session_id) for c in waited}
    calls = len(result.calls)
    judged, attained = _attainment(result.calls)
    return PolicyReport(
        policy=result.policy,
        calls=calls,
        sessions=len(tasks),
        failed_sessions=sum(1 for s in tasks if s.failed is not None),
        cold_starts=len(cold),
        cold_start_s=cold_start_s,
        first_load_s=_first_loads(cold, end_s),
        ttft_p50_s=percentile(ttft, 50),
        ttft_p95_s=percentile(ttft, 95),
        ttft_p99_s=percentile(ttft, 99),
        task_p50_s=percentile(task_s, 50),
        task_p95_s=percentile(task_s, 95),
        task_p99_s=percentile(task_s, 99),
        gpu_hours=held_gpu_s / 3600,
        cost_usd=held_usd,
        gpu_utilization=busy_gpu_s / replica_gpu_s if replica_gpu_s > 0 else None,
        tokens_lost=sum(p.tokens_lost for p in result.preemptions),
        tokens_lost_restart=sum(p.tokens_lost_restart for p in result.preemptions),
        preemptions=len(result.preemptions),
        tasks_waited=len(waited_tasks & {s.session_id for s in tasks}),
        gpu_wait_p50_s=percentile(waits, 50),
        gpu_wait_p95_s=percentile(waits, 95),
        gpu_wait_max_s=waits[-1] if waits else None,
        calls_waited_for_load=sum(1 for c in result.calls if c.waited_for_load),
        decision_us_per_call=result.decision_seconds / calls * 1e6 if calls else 0.0,
        recent_cold_start_share=_recent_cold_starts(result) / calls if calls else 0.0,
        prewarms=sum(1 for r in result.replicas if r.prewarm),
        prewarms_used=sum(1 for r in result.replicas if r.prewarm and r.first_lease_s is not None),
        slo_attainment=attained / judged if judged else None,
        goodput_per_gpu_hour=attained / (held_gpu_s / 3600) if judged and held_gpu_s > 0 else None,
        floor_gpu_hours=result.floor_gpu_hours,
    )


def _attainment(calls: Sequence[CallRecord]) -> tuple[int, int]:
    """(calls judged, calls within both objectives): a call never served counts as a miss."""
    judged = attained = 0
    for call in calls:
        objectives = next((o for c, o in DEFAULT_OBJECTIVES.items() if c == call.service_class), None)
        if objectives is None or not objectives.per_call:
            continue
        judged += 1
        ttft, tpot = call.ttft_s, call.tpot_s
        attained += ttft is not None and tpot is not None and objectives.met(ttft, tpot)
    return judged, attained


def _held_gpus(replicas: Sequence[ReplicaRecord], end_s: float) -> tuple[float, float]:
    """(GPU-seconds, dollars) the fleet held for the run's replicas: each GPU counted once while any replica
    holds it, so two small models packed on one GPU cost one GPU, as they do on the bill. A replica recorded
    without its devices counts its GPUs whole."""
    spans: dict[tuple[str, int], list[tuple[float, float, float]]] = {}
    gpu_s = usd = 0.0
    for r in replicas:
        held = (r.started_s, r.ended_s if r.ended_s is not None else end_s, r.usd_per_hour / max(r.gpus, 1))
        if not r.devices:
            gpu_s += r.gpus * (held[1] - held[0])
            usd += r.usd_per_hour * (held[1] - held[0]) / 3600
        for index in r.devices:
            spans.setdefault((r.node_id, index), []).append(held)
    for intervals in spans.values():
        intervals.sort()
        start, end, price = intervals[0]
        for s, e, p in intervals[1:]:
            if s > end:
                gpu_s += end - start
                usd += price * (end - start) / 3600
                start, end, price = s, e, p
            else:
                end = max(end, e)
        gpu_s += end - start
        usd += price * (end - start) / 3600
    return gpu_s, usd


def _first_loads(cold: Sequence[ReplicaRecord], end_s: float) -> float:
    """Seconds of each model's first cold load: every policy pays them once its model is first called (a
    Kubernetes deployment at its rollout), so a warm pool is judged by the cold starts beyond them."""
    first: dict[str, ReplicaRecord] = {}
    for replica in sorted(cold, key=lambda r: (r.started_s, r.replica_id)):
        first.setdefault(replica.model, replica)
    return sum(r.load_s if r.load_s is not None else r.held_s(end_s) for r in first.values())


def _recent_cold_starts(result: SimResult) -> int:
    """Calls that met a cold start on a model some call was issued for in the hour before them."""
    issued: dict[str, list[float]] = {}
    for call in result.calls:
        issued.setdefault(call.model, []).append(call.issued_s)
    for times in issued.values():
        times.sort()
    count = 0
    for call in result.calls:
        if call.cold_start:
            times = issued[call.model]
            before = bisect.bisect_left(times, call.issued_s)  # calls issued strictly earlier
            count += before > 0 and call.issued_s - times[before - 1] <= RECENT_S
    return count


def beyond_first_loads_s(report: PolicyReport) -> float:
    """Cold-start seconds beyond each model's first load: 0 for a policy that only ever paid first loads.

    Every policy starting on empty disks pays the first loads (`_first_loads`), which made a ratio of whole
    cold-start times read ~1 for any keep-alive; what a warm pool can save is the loads after them (a model
    unloaded and called again, a replica lost to a reclaim, a scale-out). The max() keeps float rounding of
    the subtraction from printing -0.00 s.
    """
    return max(report.cold_start_s - report.first_load_s, 0.0)


@dataclass(frozen=True)
class WarmPoolFigure:
    """One figure a policy is judged by (the warm pool's four, the latency objectives' three): its value
    (seconds, points, a ratio or a share) and the goal's upper bound; the bound is None where the run lacks the
    baseline it is set against."""

    name: str
    value: float | None
    goal: float | None
    met: bool | None


def warm_pool_figures(report: PolicyReport, reports: Mapping[str, PolicyReport]) -> list[WarmPoolFigure]:
    """The four figures the warm pool is judged by, for one policy against the run's baselines: cold-start
    seconds beyond each model's first load (at most a fifth of k8s-spread's whole cold-start seconds: its
    own loads beyond the first are 0 whenever its one replica per model never unloads, so the bound is set
    on what a Deployment pays in all), GPU-hours over k8s-spread's, TTFT p99 over always-warm's, and the
    share of calls that met a cold start on a model used in the hour before."""
    spread, warm = reports.get("k8s-spread"), reports.get("always-warm")

    figures = [
        (
            "cold-start seconds beyond each model's first load",
            beyond_first_loads_s(report),
            0.2 * spread.cold_start_s if spread is not None else None,
        ),
        ("GPU-hours ÷ k8s-spread's", _ratio(report.gpu_hours, spread.gpu_hours if spread is not None else None), 0.6),
        ("TTFT p99 ÷ always-warm's", _ratio(report.ttft_p99_s, warm.ttft_p99_s if warm is not None else None), 1.2),
        ("calls meeting a cold start on a model used in the hour before", report.recent_cold_start_share, 0.01),
    ]
    return _judged(figures)


def _ratio(mine: float | None, theirs: float | None) -> float | None:
    return None if mine is None or not theirs else mine / theirs


def _judged(figures: Sequence[tuple[str, float | None, float | None]]) -> list[WarmPoolFigure]:
    """Each (name, value, upper bound) as a figure met or not; unjudged where either is missing."""
    return [
        WarmPoolFigure(name, value, goal, None if value is None or goal is None else value <= goal)
        for name, value, goal in figures
    ]


def _marked(value: str, figure: WarmPoolFigure) -> str:
    return f"{value} {'✓' if figure.met else '✗' if figure.met is False else ''}".strip()


def _aligned(rows: list[list[str]]) -> str:
    """Rows of cells as plain text, each column left-aligned on its widest cell."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows)


def objective_figures(report: PolicyReport, reports: Mapping[str, PolicyReport]) -> list[WarmPoolFigure]:
    """The three figures serving by latency objectives is judged by, for one policy against the run's baselines:
    how many points of SLO attainment it falls short of always-warm's (at most 1), its GPU-hours over
    k8s-spread's (at most 0.6) and its task p95 over k8s-spread's (at most 1.1): the objectives met first, then
    the GPU-hours saved, without making anyone wait longer than under Kubernetes."""
    spread, warm = reports.get("k8s-spread"), reports.get("always-warm")
    shortfall = None
    if warm is not None and warm.slo_attainment is not None and report.slo_attainment is not None:
        shortfall = (warm.slo_attainment - report.slo_attainment) * 100

    figures = [
        ("SLO attainment points below always-warm's", shortfall, 1.0),
        ("GPU-hours ÷ k8s-spread's", _ratio(report.gpu_hours, spread.gpu_hours if spread is not None else None), 0.6),
        ("task p95 ÷ k8s-spread's", _ratio(report.task_p95_s, spread.task_p95_s if spread is not None else None), 1.1),
    ]
    return _judged(figures)


def objectives_table(reports: Mapping[str, PolicyReport]) -> str:
    """One row per policy: the latency objectives' three figures (`objective_figures`), each marked against its
    goal, and its GPU-hours as a multiple of the workload's physical floor."""
    header = [
        "policy",
        "SLO met",
        "points below warm (≤1)",
        "GPU-h ÷ k8s (≤0.6)",
        "task p95 ÷ k8s (≤1.1)",
        "GPU-h ÷ floor",
    ]
    rows = [header]
    for policy, report in reports.items():
        cells = [policy, MISSING if report.slo_attainment is None else f"{report.slo_attainment:.2%}"]
        for figure in objective_figures(report, reports):
            value = MISSING if figure.value is None else f"{figure.value:.2f}"
            cells.append(_marked(value, figure))
        floor = report.floor_gpu_hours
        cells.append(f"{report.gpu_hours / floor:.2f}" if floor > 0 else MISSING)
        rows.append(cells)
    return _aligned(rows)


def _seconds(value: float | None) -> str:
    """Compact seconds for a table cell: "0.08 s", "22.7 s", "4.1 min"."""
    if value is None:
        return MISSING
    if value > 600:
        return f"{value / 60:.1f} min"
    return f"{value:.2f} s" if value < 10 else f"{value:.1f} s"


def table(reports: Sequence[PolicyReport]) -> str:
    """A plain-text table, one row per policy, columns left-aligned on their widest cell."""
    header = [
        "policy",
        "cold starts",
        "cold-start s",
        "TTFT p50",
        "TTFT p95",
        "TTFT p99",
        "task p50",
        "task p95",
        "GPU-h",
        "cost $",
        "util",
        "tokens lost (ckpt / restart)",
        "tasks waited",
        "wait p95",
        "SLO met",
        "goodput/GPU-h",
        "GPU-h ÷ floor",
    ]
    rows = [header] + [
        [
            r.policy,
            str(r.cold_starts),
            _seconds(r.cold_start_s),
            _seconds(r.ttft_p50_s),
            _seconds(r.ttft_p95_s),
            _seconds(r.ttft_p99_s),
            _seconds(r.task_p50_s),
            _seconds(r.task_p95_s),
            f"{r.gpu_hours:.1f}",
            f"{r.cost_usd:.2f}",
            MISSING if r.gpu_utilization is None else f"{r.gpu_utilization:.0%}",
            f"{r.tokens_lost} / {r.tokens_lost_restart}",
            str(r.tasks_waited),
            _seconds(r.gpu_wait_p95_s),
            MISSING if r.slo_attainment is None else f"{r.slo_attainment:.2%}",
            MISSING if r.goodput_per_gpu_hour is None else f"{r.goodput_per_gpu_hour:,.0f}",
            f"{r.gpu_hours / r.floor_gpu_hours:.1f}×" if r.floor_gpu_hours > 0 else MISSING,
        ]
        for r in reports
    ]
    return _aligned(rows)


def _ratio_or_share(value: float | None, share: bool) -> str:
    if value is None:
        return MISSING
    return f"{value:.2%}" if share else f"{value:.2f}"


def warm_pool_table(reports: Mapping[str, PolicyReport]) -> str:
    """One row per policy: its first loads' seconds (the floor every policy pays), then the four warm-pool
    figures (`warm_pool_figures`), each marked against its goal, and how many of its pre-warms a step used."""
    header = [
        "policy",
        "first loads",
        "cold-start s beyond them (≤0.2× k8s cold-start s)",
        "GPU-h ÷ k8s (≤0.6)",
        "TTFT p99 ÷ warm (≤1.2)",
        "recent cold-start calls (≤1%)",
        "pre-warms used",
    ]
    rows = [header]
    for policy, report in reports.items():
        cells = [policy, _seconds(report.first_load_s)]
        for i, figure in enumerate(warm_pool_figures(report, reports)):
            value = _seconds(figure.value) if i == 0 else _ratio_or_share(figure.value, share=i == 3)
            cells.append(_marked(value, figure))
        cells.append(f"{report.prewarms_used}/{report.prewarms}")
        rows.append(cells)
    return _aligned(rows)


def _times(ratio: float) -> str:
    return "∞×" if math.isinf(ratio) else f"{ratio:.1f}×"


def _ten_times_fewer(name: str, target: str, mine: float, theirs: float, describe: Callable[[str], str]) -> Goal:
    """Met when `theirs` (> 0) is at least ten times `mine`; `describe` words the figures around the ratio."""
    if mine == 0:
        return Goal(name, target, describe("∞×"), True)
    ratio = theirs / mine
    return Goal(name, target, describe(_times(ratio)), ratio >= 10)


def _cold_start_goal(berth: PolicyReport, spread: PolicyReport | None) -> Goal:
    """Berth's cold starts beyond its first loads (which every policy pays) against all of k8s-spread's: its
    loads beyond the first are 0 whenever its one replica per model never unloads, so they make no bound."""
    name, target = COLD_START_GOAL
    if spread is None:
        return Goal(name, target, "no k8s-spread run", None)
    beyond = beyond_first_loads_s(berth)
    return _ten_times_fewer(
        name,
        target,
        beyond,
        spread.cold_start_s,
        lambda ratio: (
            f"berth {_seconds(beyond)} beyond its first loads ({_seconds(berth.first_load_s)}) "
            f"vs k8s-spread {_seconds(spread.cold_start_s)} in all ({ratio})"
        ),
    )


def _gpu_hours_goal(berth: PolicyReport, warm: PolicyReport | None) -> Goal:
    name, target = GPU_HOURS_GOAL
    if warm is None:
        return Goal(name, target, "no always-warm run", None)
    if warm.gpu_hours == 0 or berth.ttft_p99_s is None or warm.ttft_p99_s is None:
        return Goal(name, target, "no GPU-hours or no first tokens to compare", None)
    saved = 1 - berth.gpu_hours / warm.gpu_hours
    slower = berth.ttft_p99_s / warm.ttft_p99_s if warm.ttft_p99_s > 0 else math.inf
    measured = (
        f"GPU-hours {berth.gpu_hours:.1f} vs {warm.gpu_hours:.1f} ({saved:.0%} lower); "
        f"p99 TTFT {_seconds(berth.ttft_p99_s)} vs {_seconds(warm.ttft_p99_s)} ({_times(slower)})"
    )
    return Goal(name, target, measured, saved >= 0.40 and berth.ttft_p99_s <= 1.5 * warm.ttft_p99_s)


def _tokens_goal(berth: PolicyReport) -> Goal:
    name, target = TOKENS_GOAL
    if berth.preemptions == 0:
        return Goal(name, target, "no preemptions in this run", None)
    if berth.tokens_lost_restart == 0:
        return Goal(name, target, f"{berth.preemptions} preemption(s), none under a running step", None)
    return _ten_times_fewer(
        name,
        target,
        berth.tokens_lost,
        berth.tokens_lost_restart,
        lambda ratio: f"{berth.tokens_lost} tokens lost vs {berth.tokens_lost_restart} on restart ({ratio})",
    )


def goals(reports: Mapping[str, PolicyReport]) -> list[Goal]:
    """Berth's three claims, each checked against the baseline it is made against."""
    berth = reports.get("berth")
    if berth is None:
        return [
            Goal(name, target, "no berth run", None) for name, target in (COLD_START_GOAL, GPU_HOURS_GOAL, TOKENS_GOAL)
        ]
    return [
        _cold_start_goal(berth, reports.get("k8s-spread")),
        _gpu_hours_goal(berth, reports.get("always-warm")),
        _tokens_goal(berth),
    ]


def _json_safe(value: object) -> object:
    """Infinities become "inf"/"-inf" and NaN null: JSON has no token for them, and readers reject Python's."""
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def write_json(
    reports: Mapping[str, PolicyReport], goals: Sequence[Goal], path: Path, meta: Mapping[str, object]
) -> None:
    """The run's figures for machines: {"meta", "policies": {name: figures}, "goals": [...], "warm_pool":
    {name: [...]}}, strict JSON."""
    document = {
        "meta": meta,
        "policies": {name: asdict(r) for name, r in reports.items()},
        "goals": [asdict(g) for g in goals],
        "warm_pool": {name: [asdict(f) for f in warm_pool_figures(r, reports)] for name, r in reports.items()},
        "objectives": {name: [asdict(f) for f in objective_figures(r, reports)] for name, r in reports.items()},
    }
    path.write_text(
        json.dumps(_json_safe(document), indent=2, ensure_ascii=False, allow_nan=False) + "\n", encoding="utf-8"
    )


def draw_charts(results: Sequence[SimResult], reports: Sequence[PolicyReport], out_dir: Path) -> list[Path]:
    """ttft.png, gpu_hours.png and replicas.png in out_dir; the paths written.

    matplotlib is imported here, not at module level: it costs about a second, and only a run that
    asks for charts should pay it. Agg renders to files with no display.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator, NullFormatter

    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []

    fig, ax = plt.subplots(figsize=(8, 5))
    for result in results:
        ttft = [t for c in result.calls if (t := c.ttft_s) is not None and t > 0]  # a log axis has no 0
        if ttft:
            ax.ecdf(ttft, label=result.policy)
    if ax.lines:
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())  # a short range gets minor labels that overlap
        ax.legend()
    ax.set(title="Time to first token, per policy", xlabel="TTFT (s, log scale)", ylabel="share of calls")
    ax.grid(True, alpha=0.3)
    written.append(_save(fig, out_dir / "ttft.png"))

    fig, ax = plt.subplots(figsize=(8, 5))
    bars = ax.bar([r.policy for r in reports], [r.gpu_hours for r in reports], label="GPU-hours")
    ax.bar_label(bars, labels=[f"${r.cost_usd:,.2f}" for r in reports], padding=2)
    ax.margins(y=0.15)  # room above the tallest bar for its cost and the legend
    ax.set(title="GPU-hours held per policy (cost on each bar)", xlabel="policy", ylabel="GPU-hours")
    ax.legend(loc="upper left")
    written.append(_save(fig, out_dir / "gpu_hours.png"))

    fig, ax = plt.subplots(figsize=(8, 5))
    for result in results:
        if result.replica_samples:
            ax.step(
                [t / 3600 for t, _ in result.replica_samples],
                [sum(counts.values()) for _, counts in result.replica_samples],
                where="post",
                label=result.policy,
            )
    if ax.lines:
        ax.legend()
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set(title="Replicas loading or warm (all models) over time", xlabel="virtual time (h)", ylabel="replicas")
    ax.grid(True, alpha=0.3)
    written.append(_save(fig, out_dir / "replicas.png"))
    return written


def _save(fig: Figure, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path
