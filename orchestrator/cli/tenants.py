"""`berth tenants …`: tenants (admins): create, list, show and change trust, GPU quota, default budget and latency
objectives."""

from __future__ import annotations

import argparse
from typing import Any

from pydantic import ValidationError
from rich.table import Table

from sdk import Client, InvalidSpec
from sdk.wire.identity import Tenant, TenantSpec, TenantUpdate, Trust
from sdk.wire.objective_layers import describe

from . import output
from .objective_flags import add_objective_flags, flag_of, objectives_given
from .output import EXIT_OK, add_api_flag, fail, run_with_client

_LIMITS = (
    ("gpu_quota", "--gpu-quota", "GPUs the tenant may hold at once"),
    ("default_budget_tokens", "--budget-tokens", "token budget of a task submitted without one"),
    ("default_budget_usd", "--budget-usd", "dollar limit of a task submitted without one"),
)


def register(subparsers: argparse._SubParsersAction) -> None:
    tenants = subparsers.add_parser(
        "tenants", help="tenants: trust level, GPU quota, default budget, latency objectives (admins)"
    )
    sub = tenants.add_subparsers(dest="tenants_command", required=True)

    p = sub.add_parser("create", help="add a tenant")
    p.add_argument("name")
    p.add_argument("--trust", default=Trust.shared.value, help="shared (default), isolated or dedicated")
    _add_limit_flags(p, clearable=False)
    add_objective_flags(p, over="the service class's defaults, for the tenant's tasks")
    add_api_flag(p)
    p.set_defaults(func=cmd_create)

    p = sub.add_parser("list", help="every tenant and its limits")
    add_api_flag(p)
    output.add_output_flag(p)
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("show", help="one tenant")
    p.add_argument("name")
    add_api_flag(p)
    output.add_output_flag(p)
    p.set_defaults(func=cmd_show)

    p = sub.add_parser("update", help="change a tenant's trust, limits or objectives (`none` clears one)")
    p.add_argument("name")
    p.add_argument("--trust", help="shared, isolated or dedicated")
    _add_limit_flags(p, clearable=True)
    add_objective_flags(
        p, over="the service class's defaults, for the tenant's tasks (the others stay)", clearable=True
    )
    add_api_flag(p)
    p.set_defaults(func=cmd_update)


def _add_limit_flags(p: argparse.ArgumentParser, clearable: bool) -> None:
    for field, flag, text in _LIMITS:
        p.add_argument(flag, dest=field, help=text + (" (none: clear it)" if clearable else ""))


def _limits(args: argparse.Namespace) -> dict[str, Any]:
    """The limit flags given, as text still ("none" meaning clear); pydantic parses and checks them."""
    values: dict[str, Any] = {}
    for field, _flag, _text in _LIMITS:
        given = getattr(args, field)
        if given is not None:
            values[field] = None if given.lower() == "none" else given
    return values


def _objectives(args: argparse.Namespace) -> dict[str, Any]:
    """The objective flags given, as the `objectives` field (a merge patch on update: the others stay)."""
    given = objectives_given(args)
    return {"objectives": given} if given else {}


def cmd_create(args: argparse.Namespace) -> int:
    try:
        spec = TenantSpec.model_validate({"name": args.name, "trust": args.trust, **_limits(args), **_objectives(args)})
    except ValidationError as exc:
        return _refused(exc)

    async def command(client: Client) -> int:
        print_tenant(await client.create_tenant(spec))
        return EXIT_OK

    return run_with_client(args, command)


def cmd_list(args: argparse.Namespace) -> int:
    async def command(client: Client) -> int:
        tenants = await client.tenants()
        return output.emit(args, tenants, lambda: output.stdout().print(tenants_table(tenants)))

    return run_with_client(args, command)


def cmd_show(args: argparse.Namespace) -> int:
    async def command(client: Client) -> int:
        tenant = await client.tenant(args.name)
        return output.emit(args, tenant, lambda: print_tenant(tenant))

    return run_with_client(args, command)


def cmd_update(args: argparse.Namespace) -> int:
    values = {**_limits(args), **_objectives(args)}
    if args.trust is not None:
        values["trust"] = args.trust
    if not values:
        return fail(
            "nothing to change; give --trust, --gpu-quota, --budget-tokens, --budget-usd or an objective"
            " (--ttft-s, --tpot-s, --deadline-s, --attainment)"
        )
    try:
        change = TenantUpdate.model_validate(values)
    except ValidationError as exc:
        return _refused(exc)

    async def command(client: Client) -> int:
        print_tenant(await client.update_tenant(args.name, change))
        return EXIT_OK

    return run_with_client(args, command)


def _refused(exc: ValidationError) -> int:
    """The first problem, named by the flag that gave the value."""
    refusal = InvalidSpec.from_validation(exc)
    flags = {field: flag.removeprefix("--") for field, flag, _text in _LIMITS}
    return fail(refusal.message, flags.get(refusal.field or "", flag_of(refusal.field)))


def print_tenant(tenant: Tenant) -> None:
    output.stdout().print(tenants_table([tenant]))


def tenants_table(tenants: list[Tenant]) -> Table:
    table = Table(box=None, header_style="bold")
    for column in ("TENANT", "TRUST", "GPU QUOTA", "DEFAULT TOKENS", "DEFAULT USD"):
        table.add_column(column, no_wrap=True)
    table.add_column("OBJECTIVES (over the class's)")
    for t in tenants:
        table.add_row(
            t.name,
            t.trust.value,
            _or_dash(t.gpu_quota),
            _or_dash(t.default_budget_tokens),
            f"${t.default_budget_usd:g}" if t.default_budget_usd is not None else "-",
            describe(t.objectives) if t.objectives is not None else "-",
        )
    return table


def _or_dash(value: int | None) -> str:
    return str(value) if value is not None else "-"
