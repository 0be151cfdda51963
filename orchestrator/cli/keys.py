"""`berth keys …`: API keys (admins): create one (its secret printed once), list them, revoke one."""

from __future__ import annotations

import argparse
from datetime import datetime

from rich.table import Table

from sdk import Client
from sdk.wire.identity import ApiKeyView, Role, tenant_problem

from . import output
from .output import EXIT_OK, add_api_flag, fail, run_with_client


def register(subparsers: argparse._SubParsersAction) -> None:
    keys = subparsers.add_parser("keys", help="API keys and their roles (admins)")
    sub = keys.add_subparsers(dest="keys_command", required=True)

    p = sub.add_parser("create", help="a new key; its secret is printed once, store it then")
    p.add_argument("--role", required=True, help="admin, operator, viewer or agent")
    p.add_argument("--tenant", help="the tenant an agent key belongs to, or that confines an operator/viewer key")
    p.add_argument("--name", default="", help="what the key is for, to recognise it in lists and the audit log")
    p.add_argument("--description", default="")
    add_api_flag(p)
    p.set_defaults(func=cmd_create)

    p = sub.add_parser("list", help="every key: id, role, tenant, name, created, last used, revoked")
    add_api_flag(p)
    output.add_output_flag(p)
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("revoke", help="refuse every later request made with a key")
    p.add_argument("key_id")
    add_api_flag(p)
    p.set_defaults(func=cmd_revoke)


def cmd_create(args: argparse.Namespace) -> int:
    try:
        role = Role(args.role)
    except ValueError:
        return fail(f"unknown role {args.role!r}; one of {', '.join(r.value for r in Role)}", "role")
    problem = tenant_problem(role, args.tenant)
    if problem is not None:
        return fail(problem, "tenant")

    async def command(client: Client) -> int:
        created = await client.create_key(role, args.tenant, args.name, args.description)
        scope = f" for tenant {created.tenant}" if created.tenant else ""
        output.stderr().print(
            f"created {created.role.value} key {created.key_id}{scope}; the secret is shown only now:"
        )
        print(created.key)  # alone on stdout, so `KEY=$(berth keys create …)` captures it
        return EXIT_OK

    return run_with_client(args, command)


def cmd_list(args: argparse.Namespace) -> int:
    async def command(client: Client) -> int:
        keys = await client.keys()
        return output.emit(args, keys, lambda: output.stdout().print(keys_table(keys)))

    return run_with_client(args, command)


def cmd_revoke(args: argparse.Namespace) -> int:
    async def command(client: Client) -> int:
        key = await client.revoke_key(args.key_id)
        assert key.revoked_at is not None
        print(f"{key.key_id} is revoked (since {key.revoked_at:%Y-%m-%d %H:%M:%S} UTC)")
        return EXIT_OK

    return run_with_client(args, command)


def keys_table(keys: list[ApiKeyView]) -> Table:
    table = Table(box=None, header_style="bold")
    for column in ("KEY", "ROLE", "TENANT", "NAME", "CREATED", "LAST USED", "REVOKED"):
        table.add_column(column, no_wrap=True)
    for k in keys:
        table.add_row(
            k.key_id,
            k.role.value,
            k.tenant or "(all)",
            k.name or "-",
            _when(k.created_at),
            _when(k.last_used_at),
            _when(k.revoked_at),
        )
    return table


def _when(at: datetime | None) -> str:
    return at.strftime("%Y-%m-%d %H:%M") if at is not None else "-"
