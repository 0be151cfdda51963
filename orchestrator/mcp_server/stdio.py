"""MCP over stdio: `berth mcp`, started by an MCP client (Claude Desktop, an IDE) as a subprocess.

One key for the whole process, the one it was started with; every tool call opens a Client
of the API with it, so what the caller may do is exactly what that key may do over /v1.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from sdk import Client

from .server import build_server


async def serve_stdio(api_url: str, api_key: str | None) -> None:
    """Serve the tools on stdin/stdout until the client closes them."""

    @asynccontextmanager
    async def caller_client() -> AsyncIterator[Client]:
        async with Client(api_url, api_key) as client:
            yield client

    await build_server(caller_client).run_stdio_async()
