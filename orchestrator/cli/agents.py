"""`berth agents …`: the registered agents (authors register them from code with the SDK)."""

from __future__ import annotations

import argparse

from sdk import Client

from . import output
from .output import add_api_flag, add_output_flag, emit, run_with_client


def register(subparsers: argparse._SubParsersAction) -> None:
    agents = subparsers.add_parser("agents", help="list and inspect registered agents")
    sub = agents.add_subparsers(dest="agents_command", required=True)

    p = sub.add_parser("list", help="the current version of every agent")
    add_api_flag(p)
    add_output_flag(p)
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("show", help="one agent: model, tools, limits, instructions")
    p.add_argument("name")
    add_api_flag(p)
    add_output_flag(p)
    p.set_defaults(func=cmd_show)


def cmd_list(args: argparse.Namespace) -> int:
    async def command(client: Client) -> int:
        agents = await client.agents()

        def show() -> None:
            if not agents:
                print("no agents registered")
            else:
                output.stdout().print(output.agents_table(agents))

        return emit(args, agents, show)

    return run_with_client(args, command)


def cmd_show(args: argparse.Namespace) -> int:
    async def command(client: Client) -> int:
        agent = await client.agent(args.name)
        return emit(args, agent, lambda: output.stdout().print(output.agent_panel(agent)))

    return run_with_client(args, command)
