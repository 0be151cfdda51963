"""`berth nodes pool-token …`: let the GPU nodes of an autoscaled pool join without a person.

`create` prints the token alone on stdout (what it admits goes to stderr), so a script can put it straight into the
Secret the pool's node agents read: `kubectl create secret generic berth-pool-gpu-h100 --from-literal=join-token="$(
berth nodes pool-token create --pool gpu-h100 --max-nodes 32)"`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from datetime import UTC, datetime

from rich.table import Table

from sdk import Client
from sdk.wire.node_pools import DEFAULT_POOL_MAX_NODES, PoolTokenView

from . import output
from .output import EXIT_OK, add_api_flag, fail, run_with_client


def register(sub: argparse._SubParsersAction, parse_duration: Callable[[str], float]) -> None:
    """`pool-token` under `berth nodes`; `parse_duration` is the nodes commands' own ("24h", "30d")."""
    tokens = sub.add_parser("pool-token", help="tokens that let a node pool's GPU nodes join without a person")
    verbs = tokens.add_subparsers(dest="pool_token_command", required=True)

    p = verbs.add_parser("create", help="mint a pool token: its nodes are admitted at once into the pool")
    p.add_argument("--pool", required=True, help="the node pool its nodes join (letters, digits, - _ .)")
    p.add_argument(
        "--max-nodes",
        type=int,
        default=DEFAULT_POOL_MAX_NODES,
        help=f"how many of its nodes may be in the fleet at once, 1 to 10000 (default {DEFAULT_POOL_MAX_NODES})",
    )
    p.add_argument("--ttl", default="24h", help="until it admits no one: 10m, 24h, 30d at most (default 24h)")
    p.add_argument("--dedicated", metavar="TENANT", help="its nodes serve only this tenant (berth nodes trust)")
    add_api_flag(p)
    p.set_defaults(func=cmd_create, parse_duration=parse_duration)

    p = verbs.add_parser("list", help="every pool token: its pool, places taken, expiry; never its secret")
    p.add_argument("--pool", help="only this pool's tokens")
    add_api_flag(p)
    output.add_output_flag(p)
    p.set_defaults(func=cmd_list)

    p = verbs.add_parser(
        "revoke", help="no node joins with the token any more; its nodes stay (berth nodes revoke each one)"
    )
    p.add_argument("token_id")
    add_api_flag(p)
    p.set_defaults(func=cmd_revoke)


def cmd_create(args: argparse.Namespace) -> int:
    try:
        ttl_s = args.parse_duration(args.ttl)
    except ValueError as exc:
        return fail(str(exc), "ttl")

    async def command(client: Client) -> int:
        token = await client.create_pool_token(args.pool, args.max_nodes, round(ttl_s), args.dedicated)
        print(token.join_token)
        until = token.expires_at.isoformat(timespec="seconds")
        serves = f", dedicated to {token.labels['dedicated']}" if "dedicated" in token.labels else ""
        print(
            f"pool token {token.token_id}: up to {token.max_nodes} nodes join pool {token.pool} admitted{serves},"
            f" until {until}: berth node --join-token TOKEN (or BERTH_JOIN_TOKEN); it is not shown again",
            file=sys.stderr,
        )
        return EXIT_OK

    return run_with_client(args, command)


def cmd_list(args: argparse.Namespace) -> int:
    async def command(client: Client) -> int:
        tokens = await client.pool_tokens(args.pool)
        return output.emit(args, tokens, lambda: output.stdout().print(tokens_table(tokens)))

    return run_with_client(args, command)


def cmd_revoke(args: argparse.Namespace) -> int:
    async def command(client: Client) -> int:
        token = await client.revoke_pool_token(args.token_id)
        print(
            f"pool token {token.token_id} of pool {token.pool} is revoked; its {token.nodes} node(s) stay"
            " (berth nodes revoke NODE_ID, each one)"
        )
        return EXIT_OK

    return run_with_client(args, command)


def tokens_table(tokens: list[PoolTokenView], now: datetime | None = None) -> Table:
    now = now or datetime.now(UTC)
    table = Table(box=None, header_style="bold")
    for column in ("TOKEN", "POOL", "NODES", "TRUST", "EXPIRES", "STATE", "CREATED BY"):
        table.add_column(column, no_wrap=True)
    for t in tokens:
        state = "revoked" if t.revoked_at else ("expired" if t.expires_at <= now else "live")
        table.add_row(
            t.token_id,
            t.pool,
            f"{t.nodes}/{t.max_nodes}",
            ", ".join(f"{k}={v}" for k, v in sorted(t.labels.items())) or "-",
            t.expires_at.isoformat(timespec="seconds"),
            state,
            t.created_by or "-",
        )
    return table
