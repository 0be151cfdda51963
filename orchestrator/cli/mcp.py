"""`berth mcp`: Berth's tools for an MCP client, over stdio (the client starts this as its subprocess).

stdout carries the protocol and nothing else; logs go to stderr (main's logging setup).
"""

from __future__ import annotations

import argparse
import asyncio

from .output import add_api_flag, api_key, api_url


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("mcp", help="serve Berth's MCP tools over stdio, acting with the given API key")
    add_api_flag(p)
    p.set_defaults(func=cmd_mcp)


def cmd_mcp(args: argparse.Namespace) -> int:
    from ..mcp_server import serve_stdio

    asyncio.run(serve_stdio(api_url(args), api_key(args)))
    return 0
