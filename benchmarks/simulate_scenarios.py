"""Berth's placement and warm pool against the Kubernetes-style policies on the four standard scenarios.

Each scenario's workload (orchestrator/simulator/scenarios.py, seed 0) runs on the standard 12-node
fleet under every policy, in virtual time; ratios compare each policy with the baselines of the same run.
The warm-pool table gives, for every policy, cold-start seconds and GPU-hours over k8s-spread's, TTFT p99
over always-warm's, and the share of calls that met a cold start on a model used in the hour before,
against their goals. Figures go to benchmarks/results/simulate_scenarios.json, charts to
benchmarks/results/simulator/<scenario>/.

    python -m benchmarks.simulate_scenarios [--seed N] [--scenarios bursty,steady]
"""

from __future__ import annotations

import argparse
import dataclasses
import time

from orchestrator.simulator.compare import run_policies, spot_nodes
from orchestrator.simulator.policies import POLICY_NAMES
from orchestrator.simulator.report import draw_charts, goals, summarize, table, warm_pool_figures, warm_pool_table
from orchestrator.simulator.scenarios import SCENARIOS, STANDARD_FLEET, catalogue_models, scenario
from orchestrator.simulator.workload import generate

from ._results import RESULTS, write_results


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b in (None, 0) else round(a / b, 3)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    args = parser.parse_args()
    figures: dict[str, object] = {
        "seed": args.seed,
        "fleet_gpus": sum(len(n.devices) for n, _ in STANDARD_FLEET.expand()),
        "scenarios": {},
    }
    for name in args.scenarios.split(","):
        workload = generate(scenario(name), args.seed, spot_nodes(STANDARD_FLEET))
        started = time.perf_counter()
        results = run_policies(STANDARD_FLEET, catalogue_models(), workload, POLICY_NAMES, args.seed)
        wall = time.perf_counter() - started
        reports = {r.policy: summarize(r) for r in results}
        berth, spread, warm = reports["berth"], reports["k8s-spread"], reports["always-warm"]
        print(f"\n== {name}: {len(workload.sessions)} sessions, {berth.calls} calls, simulated in {wall:.1f} s")
        print(table(list(reports.values())))
        for goal in goals(reports):
            print(f"  [{'met' if goal.met else 'MISSED' if goal.met is False else 'n/a'}] {goal.name}: {goal.measured}")
        warm_pool = {p: warm_pool_figures(r, reports) for p, r in reports.items()}
        print(warm_pool_table(reports))
        charts = draw_charts(results, list(reports.values()), RESULTS / "simulator" / name)
        figures["scenarios"][name] = {  # type: ignore[index]
            "sessions": len(workload.sessions),
            "wall_s": round(wall, 2),
            "ratios": {
                "k8s_spread_cold_start_s_over_berth": _ratio(spread.cold_start_s, berth.cold_start_s),
                "berth_gpu_hours_over_always_warm": _ratio(berth.gpu_hours, warm.gpu_hours),
                "berth_p99_ttft_over_always_warm": _ratio(berth.ttft_p99_s, warm.ttft_p99_s),
                "restart_tokens_lost_over_berth": _ratio(berth.tokens_lost_restart, berth.tokens_lost)
                if berth.tokens_lost
                else None,
            },
            "goals": [dataclasses.asdict(g) for g in goals(reports)],
            "warm_pool": {p: [dataclasses.asdict(f) for f in figs] for p, figs in warm_pool.items()},
            "policies": {p: dataclasses.asdict(r) for p, r in reports.items()},
            "charts": [str(c.relative_to(RESULTS)) for c in charts],
        }
    print(f"\nwrote {write_results('simulate_scenarios', figures)}")


if __name__ == "__main__":
    main()
