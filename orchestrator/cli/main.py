"""`berth`: one command for every Berth process and for talking to a running stack.

Process commands (up, server, worker, engine) import their heavy dependencies only when
chosen, so `berth tasks list` starts fast.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from ..config import BerthConfig, SecretSettingRefused, TemporalSettingsRefused


def _config(args: argparse.Namespace) -> BerthConfig:
    return BerthConfig.load(
        data_dir=getattr(args, "data_dir", None),
        api_port=getattr(args, "api_port", None),
        temporal_port=getattr(args, "temporal_port", None),
        temporal_ui_port=getattr(args, "temporal_ui_port", None),
        engine_port=getattr(args, "engine_port", None),
        host=getattr(args, "host", None),
    )


def _add_stack_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data-dir", help="state directory (env BERTH_DATA_DIR, default ./.berth)")
    p.add_argument("--host", help="address to bind (env BERTH_HOST, default 127.0.0.1)")
    p.add_argument("--api-port", type=int, help="API and UI port (env BERTH_API_PORT, default 8080)")
    p.add_argument("--temporal-port", type=int, help="Temporal frontend port (env BERTH_TEMPORAL_PORT, default 7233)")
    p.add_argument("--temporal-ui-port", type=int, help="Temporal UI port (env BERTH_TEMPORAL_UI_PORT, default 8233)")
    p.add_argument("--engine-port", type=int, help="simulated engine port (env BERTH_ENGINE_PORT, default 8090)")


def cmd_up(args: argparse.Namespace) -> int:
    from ..stack.fleet import DEFAULT_FLEET, load_fleet
    from ..stack.up import run_up

    agents = [a for a in (args.agents or "").split(",") if a]
    config = _config(args)
    if args.no_fleet:
        config = config.model_copy(update={"fleet": False})
    if args.load_time_scale is not None:
        if args.load_time_scale < 0:
            print(f"error: load-time-scale: must be >= 0, got {args.load_time_scale}", file=sys.stderr)
            return 2
        config = config.model_copy(update={"load_time_scale": args.load_time_scale})
    try:
        fleet = load_fleet(Path(args.fleet)) if args.fleet else list(DEFAULT_FLEET)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return run_up(config, demo=args.demo, tool_agents=agents, fleet=fleet, otel_console=args.otel_console)


def cmd_server(args: argparse.Namespace) -> int:
    from ..server.serve import run_server

    return run_server(_config(args))


def cmd_worker(args: argparse.Namespace) -> int:
    config = _config(args)
    if args.agents:
        from .tool_worker import run_tool_worker

        return run_tool_worker(config, args.agents.split(","))
    from ..worker import main as worker_main

    worker_main(config)
    return 0


def cmd_engine(args: argparse.Namespace) -> int:
    from ..engines.simulated import serve

    config = _config(args)
    serve(host=config.host, port=config.engine_port, latency_scale=config.engine_latency_scale)
    return 0


DISTRIBUTION = "berth-platform"  # the name it is installed under ("berth" is taken on the public index)


def _installed_version() -> str:
    """The installed distribution's version (what a bug report needs), or that it is not installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return "(not installed: run from a source tree)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="berth", description="Durable AI-agent tasks on a GPU pool.")
    parser.add_argument("--version", action="version", version=f"berth {_installed_version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("up", help="run the whole stack on this machine (Temporal, server, worker, GPU fleet)")
    _add_stack_flags(p)
    p.add_argument("--demo", action="store_true", help="also run the sample agents and a demo workload")
    p.add_argument("--agents", help="also serve these agents' tools (module:attr,…)")
    p.add_argument(
        "--otel-console",
        action="store_true",
        help="every Berth process prints its trace spans to its log (a quick look without a collector)",
    )
    p.add_argument("--fleet", metavar="FILE", help="the simulated nodes to start, as JSON (default: 3 nodes, 2 DCs)")
    p.add_argument("--no-fleet", action="store_true", help="no GPU nodes: one simulated engine serves every model")
    p.add_argument(
        "--load-time-scale",
        type=float,
        help="multiplies simulated replicas' load time (env BERTH_LOAD_TIME_SCALE, default 0.25)",
    )
    p.set_defaults(func=cmd_up)

    p = sub.add_parser("server", help="the control-plane HTTP server (API, /healthz, /readyz)")
    _add_stack_flags(p)
    p.set_defaults(func=cmd_server)

    p = sub.add_parser("worker", help="the orchestrator worker, or with --agents an agent's tool worker")
    _add_stack_flags(p)
    p.add_argument("--agents", help="serve the tools of these agents (module:attr, comma separated)")
    p.set_defaults(func=cmd_worker)

    p = sub.add_parser("engine", help="the simulated OpenAI-compatible inference engine")
    _add_stack_flags(p)
    p.set_defaults(func=cmd_engine)

    from . import agents, completion, keys, mcp, models, node, nodes, replay, simulate, tasks, tenants

    tasks.register(sub)
    agents.register(sub)
    models.register(sub)
    nodes.register(sub)
    node.register(sub)
    keys.register(sub)
    tenants.register(sub)
    mcp.register(sub)
    simulate.register(sub)
    replay.register(sub)
    completion.register(sub, build_parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request drowns the output
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    # Every process reads its settings, and its secrets' files, before it starts anything: one line, exit 2.
    except (TemporalSettingsRefused, SecretSettingRefused) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
