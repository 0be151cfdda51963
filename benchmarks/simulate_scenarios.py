"""Berth's placement and warm pool against the Kubernetes-style policies: the standard scenarios and a real trace.

The workloads:
- the five standard scenarios (orchestrator/simulator/scenarios.py): steady, bursty, spot-heavy and many-models,
  made up, and agent-sessions, drawn from the published statistics of GitHub Copilot's coding-agent traces
  (CC-BY 4.0, Liu et al., "Agentic Coding in the Wild", arXiv 2608.00101);
- azure-code-2023: one hour of Azure's production LLM inference (8,819 calls of its code service), replayed at
  its own times: ../shared/traces/azure-llm-2023-code.csv, from the Azure LLM inference trace 2023, CC-BY 4.0,
  Patel et al., "Splitwise: Efficient generative LLM inference using phase splitting", ISCA 2024.
Each runs on the standard 12-node fleet under every policy, in virtual time, once per seed. A seed draws a
scenario's sessions and its spot reclaims; a trace's calls are what they were, so there it only drives the
random policy. Ratios compare each policy with the baselines of the same run.

The objectives table gives, for every policy, its SLO attainment (calls within their class's TTFT and TPOT
objectives) and how many points it falls short of always-warm's, its GPU-hours against k8s-spread's and the
workload's physical floor, and its task p95 against k8s-spread's. The warm-pool table gives, for every policy, its cold-start seconds beyond each model's first load (which every
policy pays) and GPU-hours against k8s-spread's, TTFT p99 over always-warm's, and the share of calls that met a
cold start on a model used in the hour before, against their goals. Each run's figures go to
benchmarks/results/simulator/<workload>/seed-<n>.json, the first seed's charts beside them, and an index of all
runs to benchmarks/results/simulate_scenarios.json.

    python -m benchmarks.simulate_scenarios [--seeds 0,1,2] [--scenarios bursty,azure-code-2023]
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path

from orchestrator.simulator.agent_sessions import SOURCE as AGENT_SESSIONS_SOURCE
from orchestrator.simulator.compare import run_policies, spot_nodes
from orchestrator.simulator.plan import Workload
from orchestrator.simulator.policies import POLICY_NAMES
from orchestrator.simulator.report import (
    beyond_first_loads_s,
    draw_charts,
    goals,
    objective_figures,
    objectives_table,
    summarize,
    table,
    warm_pool_figures,
    warm_pool_table,
)
from orchestrator.simulator.scenarios import SCENARIOS, STANDARD_FLEET, catalogue_models, scenario
from orchestrator.simulator.trace import read_trace
from orchestrator.simulator.workload import generate

from ._results import RESULTS, write_results

REPO = Path(__file__).resolve().parents[1]
TRACES = {"azure-code-2023": REPO / "../shared/traces/azure-llm-2023-code.csv"}
# What each workload's results carry: where its traffic comes from (CC-BY 4.0 asks for the attribution).
SOURCES = {
    **{name: "generated: orchestrator/simulator/scenarios.py" for name in SCENARIOS},
    "agent-sessions": AGENT_SESSIONS_SOURCE,
    "azure-code-2023": (
        "Azure LLM inference trace 2023, code (Azure/AzurePublicDataset, data/AzureLLMInferenceTrace_code.csv), "
        '2023-11-16 18:15-19:14 UTC, CC-BY 4.0: Patel et al., "Splitwise: Efficient generative LLM inference '
        'using phase splitting", ISCA 2024; every call its own session, the model set to qwen2.5-7b'
    ),
}


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b in (None, 0) else round(a / b, 3)


def _workload(name: str, seed: int) -> Workload:
    spot = spot_nodes(STANDARD_FLEET)
    if name in TRACES:
        return read_trace(TRACES[name], spot_nodes=spot, seed=seed)
    return generate(scenario(name), seed, spot)


def _run(name: str, seed: int, charts: bool) -> dict[str, object]:
    """One workload under every policy for one seed: printed, and its figures returned."""
    workload = _workload(name, seed)
    started = time.perf_counter()
    results = run_policies(STANDARD_FLEET, catalogue_models(), workload, POLICY_NAMES, seed)
    wall = time.perf_counter() - started
    reports = {r.policy: summarize(r) for r in results}
    berth, warm = reports["berth"], reports["always-warm"]
    print(
        f"\n== {name}, seed {seed}: {len(workload.sessions)} sessions, {berth.calls} calls, simulated in {wall:.1f} s"
    )
    print(table(list(reports.values())))
    for goal in goals(reports):
        print(f"  [{'met' if goal.met else 'MISSED' if goal.met is False else 'n/a'}] {goal.name}: {goal.measured}")
    print(warm_pool_table(reports))
    print(objectives_table(reports))
    drawn = draw_charts(results, list(reports.values()), RESULTS / "simulator" / name) if charts else []
    return {
        "workload": name,
        "seed": seed,
        "source": SOURCES[name],
        "sessions": len(workload.sessions),
        "calls": berth.calls,
        "wall_s": round(wall, 2),
        "berth_cold_start_s_beyond_first_loads": round(beyond_first_loads_s(berth), 1),
        "ratios": {
            "berth_gpu_hours_over_always_warm": _ratio(berth.gpu_hours, warm.gpu_hours),
            "berth_p99_ttft_over_always_warm": _ratio(berth.ttft_p99_s, warm.ttft_p99_s),
            "restart_tokens_lost_over_berth": _ratio(berth.tokens_lost_restart, berth.tokens_lost)
            if berth.tokens_lost
            else None,
        },
        "goals": [dataclasses.asdict(g) for g in goals(reports)],
        "warm_pool": {p: [dataclasses.asdict(f) for f in warm_pool_figures(r, reports)] for p, r in reports.items()},
        "objectives": {p: [dataclasses.asdict(f) for f in objective_figures(r, reports)] for p, r in reports.items()},
        "floor_gpu_hours": round(berth.floor_gpu_hours, 3),
        "policies": {p: dataclasses.asdict(r) for p, r in reports.items()},
        "charts": [str(c.relative_to(RESULTS)) for c in drawn],
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", default="0", help="comma-separated seeds; every workload runs once per seed")
    parser.add_argument("--scenarios", default=",".join([*SCENARIOS, *TRACES]), help="scenarios and traces to run")
    args = parser.parse_args()
    try:
        seeds = [int(s) for s in args.seeds.split(",")]
    except ValueError:
        parser.error(f"--seeds: not a comma-separated list of whole numbers: {args.seeds!r}")
    names = args.scenarios.split(",")
    unknown = [n for n in names if n not in SCENARIOS and n not in TRACES]
    if unknown:
        parser.error(f"--scenarios: unknown {unknown[0]!r}; known: {', '.join([*SCENARIOS, *TRACES])}")
    missing = [n for n in names if n in TRACES and not TRACES[n].is_file()]
    if missing:
        parser.error(
            f"--scenarios: {missing[0]}'s trace {TRACES[missing[0]]} is not there; leave it out to run without"
        )
    index: dict[str, dict[str, object]] = {}
    for name in names:
        for seed in seeds:
            figures = _run(name, seed, charts=seed == seeds[0])
            objectives = figures["objectives"]
            assert isinstance(objectives, dict)
            path = write_results("simulate_scenarios", figures, file=f"simulator/{name}/seed-{seed}")
            index.setdefault(name, {})[str(seed)] = {
                "results": str(path.relative_to(RESULTS)),
                **{k: figures[k] for k in ("sessions", "calls", "wall_s", "berth_cold_start_s_beyond_first_loads")},
                "goals": figures["goals"],
                "berth_objectives": objectives["berth"],
            }
    fleet_gpus = sum(len(n.devices) for n, _ in STANDARD_FLEET.expand())
    summary = {"seeds": seeds, "fleet_gpus": fleet_gpus, "sources": {n: SOURCES[n] for n in names}, "runs": index}
    print(f"\nwrote {write_results('simulate_scenarios', summary)}")


if __name__ == "__main__":
    main()
