"""`berth simulate`: run a fleet and an agent workload in virtual time under Berth's placement and the
Kubernetes-style baselines, and report cold starts, TTFT, task time, GPU-hours, cost and tokens lost.

    berth simulate --scenario bursty --compare            # the standard fleet, every policy
    berth simulate --fleet my-fleet.json --trace calls.csv --compare --out report/
    berth simulate --fleet my-fleet.json --workload traffic.json --policy berth --seed 3
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

EXIT_BAD_INPUT = 2


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("simulate", help="simulate a fleet under an agent workload and compare policies")
    p.add_argument(
        "--scenario",
        default="bursty",
        help="standard traffic when no --workload/--trace: steady, bursty, spot-heavy, many-models, agent-sessions",
    )
    p.add_argument("--fleet", metavar="FILE", type=Path, help="fleet JSON (default: the standard 12-node fleet)")
    source = p.add_mutually_exclusive_group()
    source.add_argument("--workload", metavar="FILE", type=Path, help="a workload spec (JSON) for the generator")
    source.add_argument(
        "--trace",
        metavar="FILE",
        type=Path,
        help="a CSV of calls: timestamp, model, prompt_tokens, output_tokens, session_id",
    )
    p.add_argument(
        "--policy",
        action="append",
        metavar="NAME",
        help="berth, k8s-spread, bin-pack, random, always-warm (repeatable; default berth)",
    )
    p.add_argument("--compare", action="store_true", help="run every policy on the same workload and fleet")
    p.add_argument("--seed", type=int, default=0, help="the workload's and the random policy's seed")
    p.add_argument(
        "--preemptions-per-node-hour",
        type=float,
        default=0.0,
        help="spot reclaims per spot node and hour, for --trace (a workload spec has its own)",
    )
    p.add_argument("--notice-s", type=float, default=30.0, help="seconds of notice of each reclaim, for --trace")
    p.add_argument(
        "--baseline-node-cache",
        action="store_true",
        help="give the baselines Berth's node weight caches (default: their pods fetch from the origin)",
    )
    p.add_argument(
        "--out",
        metavar="DIR",
        type=Path,
        default=Path("simulation"),
        help="where report.json and the PNG charts go (default ./simulation)",
    )
    p.add_argument("--no-charts", action="store_true", help="skip the PNG charts")
    p.set_defaults(func=cmd_simulate)


def cmd_simulate(args: argparse.Namespace) -> int:
    from ..simulator.compare import node_names, run_policies, spot_nodes
    from ..simulator.fleet_file import load_fleet_file
    from ..simulator.policies import POLICY_NAMES
    from ..simulator.report import draw_charts, goals, objectives_table, summarize, table, warm_pool_table, write_json
    from ..simulator.scenarios import STANDARD_FLEET, catalogue_models, scenario
    from ..simulator.trace import read_trace
    from ..simulator.workload import generate, load_workload_spec

    try:
        if args.preemptions_per_node_hour < 0:
            raise ValueError(f"preemptions-per-node-hour: must be >= 0, got {args.preemptions_per_node_hour}")
        if args.notice_s < 0:
            raise ValueError(f"notice-s: must be >= 0, got {args.notice_s}")
        fleet = load_fleet_file(args.fleet) if args.fleet else STANDARD_FLEET
        spot = spot_nodes(fleet)
        if args.trace:
            workload = read_trace(
                args.trace,
                spot_nodes=spot,
                preemptions_per_node_hour=args.preemptions_per_node_hour,
                preemption_notice_s=args.notice_s,
                seed=args.seed,
            )
            source = f"trace {args.trace}"
        else:
            spec = load_workload_spec(args.workload) if args.workload else scenario(args.scenario)
            workload = generate(spec, args.seed, spot, nodes=node_names(fleet))
            source = f"workload {args.workload}" if args.workload else f"scenario {args.scenario}"
        names = list(POLICY_NAMES) if args.compare else (args.policy or ["berth"])
        results = run_policies(
            fleet, catalogue_models(), workload, names, args.seed, baseline_node_cache=args.baseline_node_cache
        )
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT

    reports = [summarize(r) for r in results]
    by_name = {r.policy: r for r in reports}
    found = goals(by_name)
    nodes = fleet.expand()
    print(
        f"{source}: {len(workload.sessions)} sessions, {len(results[0].calls)} calls, "
        f"{len(nodes)} nodes ({sum(len(n.devices) for n, _ in nodes)} GPUs), seed {args.seed}\n"
    )
    print(table(reports))
    print(
        f"\nphysical floor: {results[0].floor_gpu_hours:.2f} GPU-h (every call's prefill and decode at the fleet's "
        "best throughput, every GPU always busy); SLO met: calls within their class's TTFT and TPOT objectives"
    )
    if len(reports) > 1:
        print()
        for goal in found:
            mark = {True: "met", False: "MISSED", None: "n/a"}[goal.met]
            print(f"[{mark}] {goal.name}: {goal.measured}")
        if "k8s-spread" in by_name or "always-warm" in by_name:
            print("\nThe warm pool, each policy against k8s-spread and always-warm:")
            print(warm_pool_table(by_name))
            print("\nLatency objectives first, then GPU-hours, each policy against k8s-spread and always-warm:")
            print(objectives_table(by_name))
    args.out.mkdir(parents=True, exist_ok=True)
    meta = {
        "source": source,
        "seed": args.seed,
        "sessions": len(workload.sessions),
        "nodes": len(nodes),
        "gpus": sum(len(n.devices) for n, _ in nodes),
        "baseline_node_cache": args.baseline_node_cache,
    }
    write_json(by_name, found, args.out / "report.json", meta)
    written = [args.out / "report.json"]
    if not args.no_charts:
        written += draw_charts(results, reports, args.out)
    print("\nwrote " + ", ".join(str(p) for p in written))
    return 0
