"""`berth models …`: the model catalogue, each model's scaling policy, and prewarming its weights."""

from __future__ import annotations

import argparse

from pydantic import ValidationError
from rich.table import Table

from sdk import CatalogueModel, Client, InvalidSpec, ScalingPolicy
from sdk._catalogue import PrewarmStarted

from . import output
from .output import EXIT_OK, add_api_flag, run_with_client

POLICY_FLAGS = {
    "min_replicas": ("--min", int, "replicas kept even when idle (0 = scale to zero)"),
    "max_replicas": ("--max", int, "replicas at most"),
    "idle_timeout_s": ("--idle-timeout", float, "seconds idle before a replica is unloaded"),
    "scaler": ("--scaler", str, "queue_delay or request_count"),
    "target": ("--target", float, "queue delay in seconds, or leases per replica"),
    "warm_buffer": ("--warm-buffer", int, "extra idle replicas kept ready"),
}


def register(subparsers: argparse._SubParsersAction) -> None:
    models = subparsers.add_parser("models", help="the model catalogue and scaling policies")
    sub = models.add_subparsers(dest="models_command", required=True)

    p = sub.add_parser("list", help="every model: size, memory need, parallelism, price, policy")
    add_api_flag(p)
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("show", help="one model's entry and scaling policy")
    p.add_argument("name")
    add_api_flag(p)
    p.set_defaults(func=cmd_show)

    p = sub.add_parser("policy", help="show a model's scaling policy, or change it with the flags")
    p.add_argument("name")
    for field, (flag, kind, help_text) in POLICY_FLAGS.items():
        p.add_argument(flag, dest=field, type=kind, help=help_text)
    add_api_flag(p)
    p.set_defaults(func=cmd_policy)

    p = sub.add_parser("prewarm", help="put a model's weights on the disks of the nodes that could serve it")
    p.add_argument("name")
    p.add_argument("--datacenter", help="only nodes in this datacenter (default: every datacenter)")
    add_api_flag(p)
    p.set_defaults(func=cmd_prewarm)


def cmd_list(args: argparse.Namespace) -> int:
    async def command(client: Client) -> int:
        output.stdout().print(_table(await client.models()))
        return EXIT_OK

    return run_with_client(args, command)


def cmd_show(args: argparse.Namespace) -> int:
    async def command(client: Client) -> int:
        found = await client.model(args.name)
        output.stdout().print_json(found.model_dump_json())
        return EXIT_OK

    return run_with_client(args, command)


def cmd_policy(args: argparse.Namespace) -> int:
    changes = {f: getattr(args, f) for f in POLICY_FLAGS if getattr(args, f) is not None}

    async def command(client: Client) -> int:
        current = (await client.model(args.name)).policy
        if changes:
            try:
                policy = ScalingPolicy.model_validate({**current.model_dump(), **changes})
            except ValidationError as exc:
                err = exc.errors()[0]
                raise InvalidSpec(err["msg"], field=".".join(map(str, err["loc"])) or "policy") from exc
            current = (await client.set_policy(args.name, policy)).policy
        output.stdout().print_json(current.model_dump_json())
        return EXIT_OK

    return run_with_client(args, command)


def cmd_prewarm(args: argparse.Namespace) -> int:
    async def command(client: Client) -> int:
        started = await client.prewarm(args.name, args.datacenter)
        if not started.nodes:
            where = f" in {args.datacenter}" if args.datacenter else ""
            output.stdout().print(f"nothing to prewarm: every healthy node{where} that fits {started.model} has its weights")
        else:
            output.stdout().print(_prewarm_table(started))
        return EXIT_OK

    return run_with_client(args, command)


def _prewarm_table(started: PrewarmStarted) -> Table:
    """One line per node: where it fetches from ("datacenter": a peer there has the weights) and its workflow."""
    table = Table(box=None, header_style="bold")
    for column in ("NODE", "FETCHES FROM", "WORKFLOW"):
        table.add_column(column, no_wrap=True)
    for target in started.nodes:
        table.add_row(target.node_id, target.source, target.workflow_id)
    return table


def _table(models: list[CatalogueModel]) -> Table:
    table = Table(title="Model catalogue")
    for col in ("model", "provider", "weights", "memory need", "TP", "$/1M in/out", "replicas", "idle"):
        table.add_column(col)
    for m in models:
        e, p = m.entry, m.policy
        price = (f"{e.usd_per_1m_prompt:g} / {e.usd_per_1m_completion:g}"
                 if e.usd_per_1m_prompt is not None and e.usd_per_1m_completion is not None else "provider's")
        sized = e.provider == "self-hosted"
        table.add_row(e.name, e.provider, f"{e.weights_gib:g} GiB" if sized else "-",
                      f"{e.memory_need_gib:g} GiB" if sized else "-",
                      ",".join(map(str, e.tensor_parallel)) if sized else "-", price,
                      f"{p.min_replicas}–{p.max_replicas}", f"{p.idle_timeout_s:g}s")
    return table
