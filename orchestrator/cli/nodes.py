"""`berth nodes …`: the GPU fleet as the control plane sees it; who is admitted to it; draining nodes for maintenance.

`admit` prints the per-node join token alone on stdout (how to use it goes to stderr), so a script can hand it
straight to the node: `berth node --node-id gpu-9 --join-token "$(berth nodes admit gpu-9)"`.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime

from rich.console import Group
from rich.table import Table
from rich.text import Text

from sdk import Client, NodeView

from . import node_pools, output
from .output import EXIT_OK, add_api_flag, fail, run_with_client

_STATUS_STYLE = {
    "healthy": "green",
    "unhealthy": "red",
    "draining": "yellow",
    "lost": "magenta",
    "pending": "cyan",
    "revoked": "bright_black",
}


def register(subparsers: argparse._SubParsersAction) -> None:
    nodes = subparsers.add_parser("nodes", help="the GPU nodes of the fleet")
    sub = nodes.add_subparsers(dest="nodes_command", required=True)

    p = sub.add_parser("list", help="every node: place, capacity, GPUs, status, last heartbeat, replicas")
    p.add_argument("--status", choices=sorted(_STATUS_STYLE), help="only nodes with this status")
    p.add_argument("--datacenter", help="only nodes in this datacenter")
    add_api_flag(p)
    output.add_output_flag(p)
    p.set_defaults(func=cmd_list)

    output.add_output_flag(
        node_command(sub, "show", "one node: its spec, GPU metrics, cached weights and replicas", cmd_show)
    )
    node_command(sub, "drain", "stop placing new work on a node (what it runs finishes)", cmd_drain, undrain=False)
    node_command(sub, "undrain", "let a drained node take new work again", cmd_drain, undrain=True)
    node_command(
        sub, "admit", "mint a per-node join token: the node joins with it once, admitted at once", cmd_admit
    ).add_argument("--ttl", default="1h", help="how long the token may wait to be used: 10m, 1h, 7d (default 1h)")
    node_command(sub, "approve", "let a node that joined with the cluster token (pending) into the fleet", cmd_approve)
    trust = node_command(
        sub, "trust", "dedicate a node to one tenant, or to none: the only word on this placement reads", cmd_trust
    ).add_mutually_exclusive_group(required=True)
    trust.add_argument("--dedicated", metavar="TENANT", help="only this tenant's steps are placed on the node")
    trust.add_argument("--shared", action="store_true", help="the node serves every tenant (no dedication)")
    node_command(
        sub,
        "revoke",
        "kill a node's credential now: its steps move elsewhere; it must be admitted again",
        cmd_revoke,
        remove=False,
    )
    node_command(sub, "remove", "revoke a node and forget it, so its id may be admitted anew", cmd_revoke, remove=True)
    node_command(
        sub, "preempt", "take a node away as a spot reclaim would: its tasks resume elsewhere", cmd_preempt
    ).add_argument("--notice", default="30s", help="the warning it gets: 30s, 2m or seconds (default 30s)")
    node_pools.register(sub, parse_duration)


def node_command(
    sub: argparse._SubParsersAction, name: str, text: str, func: Callable[[argparse.Namespace], int], **defaults: object
) -> argparse.ArgumentParser:
    """A subcommand that acts on one node, named by its id."""
    p = sub.add_parser(name, help=text)
    p.add_argument("node_id")
    add_api_flag(p)
    p.set_defaults(func=func, **defaults)
    return p


def cmd_list(args: argparse.Namespace) -> int:
    async def command(client: Client) -> int:
        nodes = await client.nodes(args.status, args.datacenter)
        return output.emit(args, nodes, lambda: output.stdout().print(nodes_table(nodes)))

    return run_with_client(args, command)


def cmd_show(args: argparse.Namespace) -> int:
    async def command(client: Client) -> int:
        node = await client.node(args.node_id)
        return output.emit(args, node, lambda: output.stdout().print(node_panel(node)))

    return run_with_client(args, command)


def cmd_drain(args: argparse.Namespace) -> int:
    async def command(client: Client) -> int:
        node = await (client.undrain if args.undrain else client.drain)(args.node_id)
        print(f"{node.node_id} is {node.status}")
        return EXIT_OK

    return run_with_client(args, command)


def cmd_admit(args: argparse.Namespace) -> int:
    try:
        ttl_s = parse_duration(args.ttl)
    except ValueError as exc:
        return fail(str(exc), "ttl")

    async def command(client: Client) -> int:
        admission = await client.admit_node(args.node_id, round(ttl_s))
        print(admission.join_token)
        until = admission.expires_at.isoformat(timespec="seconds")
        print(
            f"a join token for node {admission.node_id}, usable once until {until}:"
            f" berth node --node-id {admission.node_id} --join-token TOKEN",
            file=sys.stderr,
        )
        return EXIT_OK

    return run_with_client(args, command)


def cmd_approve(args: argparse.Namespace) -> int:
    async def command(client: Client) -> int:
        node = await client.approve_node(args.node_id)
        print(f"{node.node_id} is approved: it is {node.status}")
        return EXIT_OK

    return run_with_client(args, command)


def cmd_trust(args: argparse.Namespace) -> int:
    async def command(client: Client) -> int:
        node = await client.set_node_trust(args.node_id, None if args.shared else args.dedicated)
        owner = node.labels.get("dedicated")
        print(f"{node.node_id} is dedicated to {owner}" if owner else f"{node.node_id} serves every tenant")
        return EXIT_OK

    return run_with_client(args, command)


def cmd_revoke(args: argparse.Namespace) -> int:
    async def command(client: Client) -> int:
        done = await (client.remove_node if args.remove else client.revoke_node)(args.node_id)
        what = "revoked and removed" if done.removed else "revoked"
        print(f"{done.node_id} is {what}; {len(done.tasks_moved)} task(s) told to move their steps")
        if done.tasks_unreached:
            print(f"not reached (their steps end as a lost node's): {', '.join(done.tasks_unreached)}", file=sys.stderr)
        return EXIT_OK

    return run_with_client(args, command)


def cmd_preempt(args: argparse.Namespace) -> int:
    try:
        notice_s = parse_duration(args.notice)
    except ValueError as exc:
        return fail(str(exc), "notice")

    async def command(client: Client) -> int:
        node = await client.preempt_node(args.node_id, notice_s)
        deadline = node.preempt_by.isoformat(timespec="seconds") if node.preempt_by else "now"
        print(f"{node.node_id} is {node.status}; it leaves by {deadline}")
        return EXIT_OK

    return run_with_client(args, command)


def parse_duration(text: str) -> float:
    """Seconds from "30s", "2m", "1h", "7d" or a plain number of seconds."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86_400}
    number, unit = (text[:-1], units[text[-1]]) if text and text[-1] in units else (text, 1)
    try:
        seconds = float(number) * unit
    except ValueError:
        raise ValueError(f"expected a duration such as 30s, 2m or 45, got {text!r}") from None
    if seconds < 0:
        raise ValueError(f"must be >= 0, got {text!r}")
    return seconds


def node_panel(node: NodeView, now: datetime | None = None) -> Group:
    """One node for people: where and what it is, then its GPUs (memory in GiB), cache and replicas."""
    now = now or datetime.now(UTC)
    facts = Table.grid(padding=(0, 2))
    rows: list[tuple[str, str | Text]] = [
        ("node", node.node_id),
        ("place", f"{node.datacenter}/{node.zone}, {node.capacity}, ${node.usd_per_hour:.2f}/h"),
        ("status", Text(node.status, style=_STATUS_STYLE.get(node.status, ""))),
        ("pool", node.pool or "none (admitted one by one)"),
        ("heartbeat", age_text(node.last_heartbeat_at, now)),
        ("engines", ", ".join(node.engines) or "any"),
        (
            "weights cache",
            f"{_gib(sum(w.size_bytes for w in node.cached_weights))} of"
            f" {_gib(node.weights_cache_capacity_bytes)}: "
            + (", ".join(sorted(w.model for w in node.cached_weights)) or "empty"),
        ),
    ]
    for label, value in rows:
        facts.add_row(Text(label, style="bold"), value)
    gpus = Table(box=None, header_style="bold", title="GPUs", title_justify="left")
    for column in ("GPU", "TYPE", "MEMORY USED", "UTIL", "HEALTH"):
        gpus.add_column(column, no_wrap=True)
    for gpu in node.gpus:
        used = "–" if gpu.memory_used_mib is None else f"{gpu.memory_used_mib / 1024:.1f}"
        total = "–" if gpu.memory_total_mib is None else f"{gpu.memory_total_mib / 1024:.1f}"
        gpus.add_row(
            f"#{gpu.index}",
            gpu.type_name,
            f"{used} / {total} GiB",
            "–" if gpu.utilization_pct is None else f"{gpu.utilization_pct}%",
            "ok" if gpu.healthy else Text(gpu.reason or "unhealthy", style="red"),
        )
    replicas = Table(box=None, header_style="bold", title="Replicas", title_justify="left")
    for column in ("REPLICA", "MODEL", "ON GPU", "STATE", "LEASES", "QUEUED TOKENS"):
        replicas.add_column(column, no_wrap=True)
    for r in node.replicas:
        replicas.add_row(
            r.replica_id,
            r.model,
            ", ".join(f"#{i}" for i in r.gpu_indexes),
            r.state,
            str(r.active_leases),
            f"{r.outstanding_tokens:,}",
        )
    return Group(facts, "", gpus, "", replicas if node.replicas else Text("no replicas", style="dim"))


def _gib(size_bytes: int) -> str:
    return f"{size_bytes / 2**30:.1f} GiB"


def nodes_table(nodes: list[NodeView], now: datetime | None = None) -> Table:
    now = now or datetime.now(UTC)
    table = Table(box=None, header_style="bold")
    for column in ("NODE", "DATACENTER/ZONE", "CAPACITY", "GPUS", "STATUS", "HEARTBEAT", "REPLICAS"):
        table.add_column(column, no_wrap=True)
    for n in nodes:
        table.add_row(
            n.node_id,
            f"{n.datacenter}/{n.zone}",
            n.capacity,
            gpus_text(n),
            Text(n.status, style=_STATUS_STYLE.get(n.status, "")),
            age_text(n.last_heartbeat_at, now),
            replicas_text(n),
        )
    return table


def gpus_text(node: NodeView) -> str:
    """ "2×H100-80GB", or "1×H100-80GB, 1×L4-24GB" for a mixed node; "-" for none."""
    counts = Counter(g.type_name for g in node.gpus)
    return ", ".join(f"{k}×{t}" for t, k in sorted(counts.items())) or "-"


def age_text(at: datetime | None, now: datetime) -> str:
    if at is None:
        return "never"
    seconds = max(0, int((now - at).total_seconds()))
    if seconds < 120:
        return f"{seconds}s ago"
    if seconds < 7200:
        return f"{seconds // 60}m ago"
    return f"{seconds // 3600}h ago"


def replicas_text(node: NodeView) -> str:
    """ "2 (1 warm, 1 loading)": how many, and in which states."""
    if not node.replicas:
        return "-"
    states = Counter(r.state for r in node.replicas)
    warm_first = sorted(states.items(), key=lambda item: (item[0] != "warm", item[0]))
    return f"{len(node.replicas)} ({', '.join(f'{k} {s}' for s, k in warm_first)})"
