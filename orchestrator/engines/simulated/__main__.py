"""`python -m orchestrator.engines.simulated`: run the simulated engine as its own process.

Defaults come from Berth's configuration (BERTH_HOST, BERTH_ENGINE_PORT,
BERTH_ENGINE_LATENCY_SCALE), so `berth up` and a hand-started engine agree on the address.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from orchestrator.config import BerthConfig

from .models import DEFAULT_MODELS, parse_model
from .server import serve


def main(argv: list[str] | None = None) -> int:
    config = BerthConfig.load()
    parser = argparse.ArgumentParser(
        prog="python -m orchestrator.engines.simulated", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--host", default=config.host)
    parser.add_argument("--port", type=int, default=config.engine_port, help="0 picks a free port (printed at start)")
    parser.add_argument(
        "--latency-scale",
        type=float,
        default=config.engine_latency_scale,
        help="multiplies TTFT and per-token time; 0 answers at once",
    )
    parser.add_argument(
        "--model",
        action="append",
        dest="models",
        metavar="SPEC",
        help="serve only these: a default name or name:ttft_s:tokens_per_s[:context] (repeatable); "
        f"default: {', '.join(m.name for m in DEFAULT_MODELS)}",
    )
    parser.add_argument("--log-level", default="warning")
    parser.add_argument(
        "--usage-journal",
        type=Path,
        default=None,
        help="append every request's usage to this file and replay it at start",
    )
    parser.add_argument(
        "--load-delay",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="wait this long, as if loading weights, before answering anything (a replica's load)",
    )
    args = parser.parse_args(argv)
    if args.latency_scale < 0:
        parser.error(f"--latency-scale: must be >= 0, got {args.latency_scale}")
    if args.load_delay < 0:
        parser.error(f"--load-delay: must be >= 0, got {args.load_delay}")
    try:
        models = tuple(parse_model(spec) for spec in args.models) if args.models else DEFAULT_MODELS
    except ValueError as exc:
        parser.error(f"--model: {exc}")
    serve(
        args.host,
        args.port,
        args.latency_scale,
        models,
        args.log_level,
        usage_journal=args.usage_journal,
        load_delay_s=args.load_delay,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
