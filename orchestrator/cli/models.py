"""`berth models …`: the model catalogue, each model's scaling policy, and prewarming its weights."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable
from datetime import UTC, datetime

from pydantic import ValidationError
from rich.console import Group
from rich.padding import Padding
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from sdk import CatalogueModel, Client, InvalidSpec, ScalingPolicy
from sdk.wire.catalogue import KeepAliveView, PrewarmStarted, PrewarmView

from . import output
from .output import EXIT_FAILED, EXIT_OK, add_api_flag, fail, run_with_client

PREWARM_WAIT_S = 1800.0  # a 140 GiB model from origin at 1 Gbit/s takes about 20 minutes
MAX_PREWARM_WAIT_S = 86_400.0
PREWARM_POLL_S = 1.0  # nodes report their cache in heartbeats, a few seconds apart

LEARNED = "learned"  # --idle-timeout learned: no fixed window, the scaler learns it from the model's idle gaps


def _seconds_or_learned(raw: str) -> float | None:
    if raw.strip().lower() == LEARNED:
        return None
    return float(raw)


# field: (flag, how the flag's text becomes the field's value, what a valid value is, help)
POLICY_FLAGS: dict[str, tuple[str, Callable[[str], object], str, str]] = {
    "min_replicas": ("--min", int, "a whole number", "replicas kept even when idle (0 = scale to zero)"),
    "max_replicas": ("--max", int, "a whole number", "replicas at most"),
    "idle_timeout_s": (
        "--idle-timeout",
        _seconds_or_learned,
        f"seconds, or {LEARNED!r}",
        f"seconds idle before a replica is unloaded, or {LEARNED!r}: learned from the model's own idle gaps",
    ),
    "scaler": ("--scaler", str, "queue_delay or request_count", "queue_delay or request_count"),
    "target": ("--target", float, "a number", "queue delay in seconds, or leases per replica"),
    "warm_buffer": ("--warm-buffer", int, "a whole number", "extra idle replicas kept ready"),
    "intent_gpu_hours_per_hour": (
        "--intent-gpu-hours",
        float,
        "a number of GPU-hours",
        "GPU-hours per hour replicas pre-warmed for announced steps may sit idle unused"
        " (0 = never pre-warm for announced steps)",
    ),
}


def register(subparsers: argparse._SubParsersAction) -> None:
    models = subparsers.add_parser("models", help="the model catalogue and scaling policies")
    sub = models.add_subparsers(dest="models_command", required=True)

    p = sub.add_parser("list", help="every model: size, memory need, parallelism, price, policy")
    add_api_flag(p)
    output.add_output_flag(p)
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("show", help="one model's entry, scaling policy and the keep-alive the scaler learned")
    p.add_argument("name")
    p.add_argument("--json", dest="output", action="store_const", const="json", help="the same as -o json")
    add_api_flag(p)
    output.add_output_flag(p)
    p.set_defaults(func=cmd_show)

    p = sub.add_parser("policy", help="show a model's scaling policy, or change it with the flags")
    p.add_argument("name")
    for field, (flag, _kind, _valid, help_text) in POLICY_FLAGS.items():
        # Read as text and converted in cmd_policy, so a bad value is refused naming its field.
        p.add_argument(flag, dest=field, metavar="VALUE", help=help_text)
    add_api_flag(p)
    p.set_defaults(func=cmd_policy)

    p = sub.add_parser("prewarm", help="put a model's weights on the disks of the nodes that could serve it")
    p.add_argument("name")
    p.add_argument("--datacenter", help="only nodes in this datacenter (default: every datacenter)")
    p.add_argument(
        "--wait", action="store_true", help="follow the copies with a progress bar until every node has them"
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=PREWARM_WAIT_S,
        metavar="SECONDS",
        help=f"how long --wait waits (default {PREWARM_WAIT_S:g} s); then exit 1 naming the nodes left",
    )
    add_api_flag(p)
    p.set_defaults(func=cmd_prewarm)


def cmd_list(args: argparse.Namespace) -> int:
    async def command(client: Client) -> int:
        models = await client.models()
        return output.emit(args, models, lambda: output.stdout().print(_table(models)))

    return run_with_client(args, command)


def cmd_show(args: argparse.Namespace) -> int:
    async def command(client: Client) -> int:
        found = await client.model(args.name)
        return output.emit(args, found, lambda: output.stdout().print(model_panel(found)))

    return run_with_client(args, command)


def model_panel(model: CatalogueModel) -> Group:
    """One model for people: how it is served and what it costs, its policy, then what the scaler learned."""
    entry, policy = model.entry, model.policy
    facts = Table.grid(padding=(0, 2))
    served = (
        f"{entry.provider}, {entry.engine} engine"
        if entry.provider == "self-hosted"
        else f"hosted ({entry.litellm_route or entry.name})"
    )
    price = (
        "–"
        if entry.usd_per_1m_prompt is None and entry.usd_per_1m_completion is None
        else f"${entry.usd_per_1m_prompt or 0:g} prompt / ${entry.usd_per_1m_completion or 0:g} completion per 1M tokens"
    )
    rows = [
        ("model", entry.name),
        ("served", served),
        ("price", price),
        ("context", f"{entry.context_window:,} tokens"),
    ]
    if entry.provider == "self-hosted":
        window = "learned" if policy.idle_timeout_s is None else f"{policy.idle_timeout_s:g} s"
        rows += [
            (
                "memory",
                f"{entry.weights_gib:.1f} GiB weights + {entry.kv_headroom_gib:.1f} GiB KV ="
                f" {entry.memory_need_gib:.1f} GiB",
            ),
            ("tensor parallel", ", ".join(map(str, entry.tensor_parallel))),
            (
                "replicas",
                f"{policy.min_replicas} to {policy.max_replicas}, {policy.scaler} target"
                f" {policy.target:g}, idle window {window}",
            ),
        ]
    for label, value in rows:
        facts.add_row(Text(label, style="bold"), value)
    return Group(facts, "", foresight_section(model))


def cmd_policy(args: argparse.Namespace) -> int:
    changes: dict[str, object] = {}
    for field, (_flag, kind, valid, _help) in POLICY_FLAGS.items():
        raw = getattr(args, field)
        if raw is None:
            continue
        try:
            changes[field] = kind(raw)
        except ValueError:
            return output.fail(f"must be {valid}, not {raw!r}", field)

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
    if not 0 < args.timeout <= MAX_PREWARM_WAIT_S:
        return fail(f"must be more than 0 and at most {MAX_PREWARM_WAIT_S:g} seconds, got {args.timeout:g}", "timeout")

    async def command(client: Client) -> int:
        started = await client.prewarm(args.name, args.datacenter)
        if not started.nodes:
            where = f" in {args.datacenter}" if args.datacenter else ""
            output.stdout().print(
                f"nothing to prewarm: every healthy node{where} that fits {started.model} has its weights"
            )
            return EXIT_OK
        output.stdout().print(_prewarm_table(started))
        if not args.wait:
            return EXIT_OK
        left = await _until_cached(client, started, args.timeout)
        if left:
            return fail(
                f"after {args.timeout:g} s, {', '.join(left)} still lack the weights of {started.model}",
                "timeout",
                code=EXIT_FAILED,
            )
        print(f"{started.model}: weights on {len(started.nodes)} node(s)", file=sys.stderr)
        return EXIT_OK

    return run_with_client(args, command)


async def _until_cached(client: Client, started: PrewarmStarted, timeout_s: float) -> list[str]:
    """Follow the nodes' heartbeats (their cached weights) until each target node has the model's; the ones left."""
    pending = sorted(target.node_id for target in started.nodes)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=output.stderr(),
        transient=True,
    ) as progress:
        bar = progress.add_task(f"weights of {started.model}", total=len(pending))
        while pending and loop.time() < deadline:
            for node_id in list(pending):
                if any(w.model == started.model for w in (await client.node(node_id)).cached_weights):
                    pending.remove(node_id)
                    progress.advance(bar)
            if pending:
                await asyncio.sleep(PREWARM_POLL_S)
    return pending


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
        price = (
            f"{e.usd_per_1m_prompt:g} / {e.usd_per_1m_completion:g}"
            if e.usd_per_1m_prompt is not None and e.usd_per_1m_completion is not None
            else "provider's"
        )
        sized = e.provider == "self-hosted"
        table.add_row(
            e.name,
            e.provider,
            f"{e.weights_gib:g} GiB" if sized else "-",
            f"{e.memory_need_gib:g} GiB" if sized else "-",
            ",".join(map(str, e.tensor_parallel)) if sized else "-",
            price,
            f"{p.min_replicas}–{p.max_replicas}",
            idle_column(m),
        )
    return table


def idle_column(model: CatalogueModel) -> str:
    """The operator's fixed window ("300s"), else "learned", with the first replica's learned window if known."""
    if model.policy.idle_timeout_s is not None:
        return f"{model.policy.idle_timeout_s:g}s"
    first = model.foresight.level(1) if model.foresight else None
    return f"{LEARNED} {_span(first.window_s, digits=0)}" if first is not None else LEARNED


# --- `models show`: what the scaler learned and did ahead of demand ------------------------------


def foresight_section(model: CatalogueModel) -> Group:
    """The keep-alive per level, the announced steps, the intent budget and the recent pre-warms, as text."""
    foresight, policy = model.foresight, model.policy
    if model.entry.provider == "hosted":
        return Group(Text("keep-alive: none here, the provider serves this model"))
    if foresight is None:
        return Group(
            Text(
                "keep-alive: the scaler has not planned for this model yet"
                + (
                    f"; the policy keeps an idle replica {_span(policy.idle_timeout_s)}"
                    if policy.idle_timeout_s is not None
                    else "; it learns each replica's idle window from the model's own idle gaps"
                )
            )
        )
    parts: list[Text | Padding] = [Text(f"keep-alive, as the scaler planned it at {_when(foresight.updated_at)}:")]
    if not foresight.keep_alive:
        parts.append(Text("  no replica level planned yet"))
    parts += [Text(f"  {keep_alive_line(k)}") for k in sorted(foresight.keep_alive, key=lambda k: k.level)]
    parts.append(Text(f"announced steps: {foresight.announced} not arrived yet"))
    if foresight.slo_attainment is not None:
        parts.append(
            Text(f"SLO attainment (recent): {foresight.slo_attainment:.1%} (target {foresight.slo_target or 1:.1%})")
        )
    allowance = policy.intent_gpu_hours_per_hour
    parts.append(
        Text(
            f"intent GPU-hours, last hour: {foresight.intent_gpu_hours_last_hour:.2f} of {allowance:g}"
            " allowed per hour" + (" (pre-warming for announced steps is off)" if allowance == 0 else "")
        )
    )
    if foresight.prewarms:
        parts.append(Text("recent pre-warms:"))
        parts.append(Padding(prewarms_table(foresight.prewarms), (0, 0, 0, 2), expand=False))
    else:
        parts.append(Text("recent pre-warms: none"))
    return Group(*parts)


def keep_alive_line(k: KeepAliveView) -> str:
    """ "level 1: keep 12.0 min idle (learned from 254 gaps)", in words an operator reads without the code."""
    if k.prewarm_s > 0:
        what = (
            f"unload at once, pre-warm at {_span(k.prewarm_s)} after it goes idle, keep until {_span(k.window_s)} idle"
        )
    else:
        what = f"keep {_span(k.window_s)} idle"
    if k.source == "learned":
        why = f"learned from {k.gaps} gap{'' if k.gaps == 1 else 's'}"
    elif k.source == "operator":
        why = "set by the operator: the policy's idle_timeout_s"
    else:
        why = (
            f"break-even: kept until holding it has cost one cold start ({k.gaps} gap{'' if k.gaps == 1 else 's'}"
            " give no longer window)"
        )
    return f"level {k.level}: {what} ({why})"


def prewarms_table(prewarms: list[PrewarmView]) -> Table:
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("REPLICA", "STARTED", "REASON", "USED", "ENDED"):
        table.add_column(column, no_wrap=True)
    for p in prewarms:
        table.add_row(
            Text(p.replica_id),
            _when(p.started_at),
            Text(p.reason),
            prewarm_used(p),
            _when(p.ended_at) if p.ended_at else "still up",
        )
    return table


def prewarm_used(p: PrewarmView) -> str:
    """ "yes, at … (N after it started)"; "no" once it ended unused; "not yet" while it is still up."""
    if p.used_at is not None:
        return f"yes, at {_when(p.used_at)} ({_span((p.used_at - p.started_at).total_seconds())} after it started)"
    return "no" if p.ended_at is not None else "not yet"


def _span(seconds: float, digits: int = 1) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.{digits}f} min"
    return f"{seconds / 3600:.1f} h"


def _when(value: datetime) -> str:
    value = value if value.tzinfo else value.replace(tzinfo=UTC)
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
