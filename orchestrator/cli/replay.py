"""`berth replay`: before an upgrade, replay the histories of tasks on the new build's workflow code.

    berth replay                           # runs started in the last 24 h, and every running one
    berth replay --since 7d --limit 5000
    berth replay --query 'WorkflowType = "AgentTaskWorkflow"'
    berth replay exported/ one.history.json   # files that `temporal workflow show --output json` wrote
    berth replay --since 1h --export histories/

Run it with the new build installed, against the Temporal namespace the old build still serves: a history
that does not replay would wedge its task the moment the new worker picks it up (every workflow task failing
with a nondeterminism error). Exit 0 when every history replays, 1 when one does not, 2 on bad input.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
from datetime import timedelta
from pathlib import Path

EXIT_FAILS = 1
EXIT_BAD_INPUT = 2
MAX_LIMIT = 1_000_000
_DURATION = re.compile(r"^(?P<n>\d+)(?P<unit>[smhd])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "replay", help="replay task histories on this build's workflow code (run it before an upgrade)"
    )
    p.add_argument("files", nargs="*", type=Path, help="history JSON files or folders (default: read from Temporal)")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--since", default="24h", help="runs started this long ago or still running: 30m, 24h, 7d")
    which.add_argument("--query", help="a Temporal visibility query choosing the runs instead")
    which.add_argument("--all", action="store_true", help="every run the namespace still keeps")
    p.add_argument("--limit", type=int, default=None, help="at most this many runs (default 1000)")
    p.add_argument("--export", metavar="DIR", type=Path, help="also write each history read to DIR as JSON")
    p.add_argument("--json", action="store_true", help="one JSON object: the verdict of every history")
    p.add_argument("--data-dir", help="state directory of a `berth up` (env BERTH_DATA_DIR)")
    p.add_argument("--temporal-port", type=int, help="Temporal frontend port (env BERTH_TEMPORAL_PORT)")
    p.set_defaults(func=cmd_replay)


def parse_duration(text: str) -> timedelta:
    """'30m', '24h', '7d' as a timedelta; ValueError naming the flag otherwise."""
    found = _DURATION.match(text.strip())
    if found is None or int(found["n"]) <= 0:
        raise ValueError(f"since: expected a positive whole number and a unit (s, m, h, d), like 24h; got {text!r}")
    return timedelta(seconds=int(found["n"]) * _UNIT_S[found["unit"]])


def cmd_replay(args: argparse.Namespace) -> int:
    from ..replay.sources import DEFAULT_MAX_HISTORIES

    try:
        limit = DEFAULT_MAX_HISTORIES if args.limit is None else args.limit
        if not 1 <= limit <= MAX_LIMIT:
            raise ValueError(f"limit: must be between 1 and {MAX_LIMIT}, got {limit}")
        query = None if args.all else args.query or _since(args.since)
        missing = [str(f) for f in args.files if not f.exists()]
        if missing:
            raise ValueError(f"files: no such file or folder: {', '.join(missing)}")
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    code = asyncio.run(_replay(args, query, limit))
    # The verdicts are out: leave now. Temporal's Core threads (the client's and the Replayer's runtimes) may still
    # be winding down while the interpreter finalizes, and then Python aborts (SIGABRT, "PyGILState_Release")
    # and the exit status an upgrade pipeline reads is lost.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _since(text: str) -> str:
    from ..replay.sources import since_query

    return since_query(parse_duration(text))


async def _replay(args: argparse.Namespace, query: str | None, limit: int) -> int:
    from ..replay.judge import judge
    from ..replay.sources import export, from_files, from_temporal

    if args.files:
        histories = list(from_files(args.files))[:limit]
    else:
        from ..config import BerthConfig
        from ..temporal import connect_temporal

        config = BerthConfig.load(data_dir=args.data_dir, temporal_port=args.temporal_port)
        client = await connect_temporal(config, attempts=3)
        histories = [h async for h in from_temporal(client, query, limit)]
    if args.export is not None:
        for history in histories:
            export(history, args.export)
    verdicts = await judge(histories)
    failing = [v for v in verdicts if not v.replays]
    if args.json:
        print(
            json.dumps(
                {"replayed": len(verdicts), "failing": len(failing), "histories": [_as_json(v) for v in verdicts]}
            )
        )
    else:
        for verdict in failing or verdicts[:0]:
            print(verdict.describe())
        print(
            f"{len(verdicts) - len(failing)} of {len(verdicts)} histories replay on this build; {len(failing)} do not"
        )
    return EXIT_FAILS if failing else 0


def _as_json(verdict: object) -> dict:
    from dataclasses import asdict

    return asdict(verdict)  # type: ignore[call-overload]  # a Verdict dataclass; typed object to keep imports lazy
