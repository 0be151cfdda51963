"""One open session with an MCP server, through the official client, kept for many calls.

The client holds anyio task groups and cancel scopes, which must be left by the asyncio
task that entered them, while tool calls arrive in activity tasks of their own. So each
session lives in a task of its own (`_hold`) and calls from any task go through it. A
session whose server went away is opened again once, by the first call that finds it
gone; a second failure is the call's, and Temporal's retry policy takes it from there.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any, cast

import httpx2
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, CallToolResult, RequestParamsMeta
from mcp_types import Tool as McpTool

from ._errors import McpToolError, McpUnreachable
from ._mcp_server import McpServer

log = logging.getLogger("berth.mcp")

CONNECT_TIMEOUT_S = 60.0  # a stdio server started through uvx or npx may install itself first
CLOSE_TIMEOUT_S = 10.0
MAX_TOOL_PAGES = 100  # a server whose tools/list never ends must not hang the tool worker's start
IDEMPOTENCY_META_KEY = "berth/idempotency_key"


class McpConnection:
    """A session with one MCP server; `extra_env` joins a stdio server's environment (a task's token)."""

    def __init__(self, server: McpServer, extra_env: dict[str, str] | None = None) -> None:
        self.server = server
        self._extra_env = extra_env or {}
        self._client: Client | None = None
        self._closing = asyncio.Event()
        self._holder: asyncio.Task[None] | None = None
        self._generation = 0  # which opening a call used, so concurrent callers reopen only once
        self._reopening = asyncio.Lock()

    async def open(self) -> None:
        ready: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
        self._closing = asyncio.Event()
        holder = asyncio.create_task(self._hold(ready, self._closing), name=f"mcp {self.server.name}")
        try:
            client = await asyncio.wait_for(asyncio.shield(ready), CONNECT_TIMEOUT_S)
        except BaseException as exc:
            holder.cancel()
            with contextlib.suppress(BaseException):
                await holder
            if not isinstance(exc, Exception):
                raise
            reason = f"no answer within {CONNECT_TIMEOUT_S:.0f} s" if isinstance(exc, TimeoutError) else _reason(exc)
            raise McpUnreachable(
                f"MCP server {self.server.name!r} ({self.server.where}) could not be reached: {reason}",
                field=f"mcp_servers.{self.server.name}",
            ) from exc
        self._client, self._holder = client, holder
        self._generation += 1

    async def close(self) -> None:
        holder, self._holder, self._client = self._holder, None, None
        if holder is None:
            return
        self._closing.set()
        try:
            await asyncio.wait_for(holder, CLOSE_TIMEOUT_S)
        except TimeoutError:
            log.warning(
                "MCP server %s did not close within %.0f s; left to its transport", self.server.name, CLOSE_TIMEOUT_S
            )

    async def list_tools(self) -> list[McpTool]:
        tools: list[McpTool] = []
        cursor: str | None = None
        for _ in range(MAX_TOOL_PAGES):
            page = await self._live().list_tools(cursor=cursor)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if cursor is None:
                break
        return tools

    async def call(
        self, tool: str, arguments: dict[str, Any], *, idempotency_key: str, timeout_s: float
    ) -> CallToolResult:
        """Call `tool` with the key in the request's `_meta`, so a server that cares can dedupe retries."""
        generation = self._generation
        try:
            return await self._call_once(tool, arguments, idempotency_key, timeout_s)
        except _SessionGone:
            log.info("MCP server %s: its session ended; opening it again", self.server.name)
        await self._reopen(generation)
        try:
            return await self._call_once(tool, arguments, idempotency_key, timeout_s)
        except _SessionGone as exc:
            raise McpToolError(f"{exc} again, right after it was opened again") from exc

    async def _call_once(self, tool: str, arguments: dict[str, Any], key: str, timeout_s: float) -> CallToolResult:
        try:
            return await self._live().call_tool(
                tool,
                arguments,
                read_timeout_seconds=timeout_s,
                meta=cast(RequestParamsMeta, {IDEMPOTENCY_META_KEY: key}),
            )
        except MCPError as exc:
            error = _SessionGone if exc.code == CONNECTION_CLOSED else McpToolError
            raise error(f"MCP server {self.server.name!r}: {exc.message} (MCP error {exc.code})") from exc

    async def _reopen(self, generation: int) -> None:
        async with self._reopening:
            if self._generation != generation:
                return  # another call opened it again meanwhile
            await self.close()
            await self.open()

    def _live(self) -> Client:
        if self._client is None or self._holder is None or self._holder.done():
            raise _SessionGone(f"MCP server {self.server.name!r}: its session has ended")
        return self._client

    async def _hold(self, ready: asyncio.Future[Client], closing: asyncio.Event) -> None:
        try:
            async with self._session() as client:
                ready.set_result(client)
                await closing.wait()
        except Exception as exc:
            if not ready.done():
                ready.set_exception(exc)
            else:
                log.debug("MCP server %s: session ended: %s", self.server.name, _reason(exc))

    @contextlib.asynccontextmanager
    async def _session(self) -> AsyncIterator[Client]:
        server = self.server
        if server.command is not None:
            params = StdioServerParameters(
                command=server.command[0],
                args=server.command[1:],
                env={**server.env, **self._extra_env} or None,
                cwd=server.cwd,
            )
            async with Client(params) as client:
                yield client
            return
        assert server.url is not None
        # The MCP transports' own timeouts: a server may hold a response stream open for minutes.
        async with httpx2.AsyncClient(headers=server.headers, timeout=httpx2.Timeout(30, read=300)) as http:
            async with Client(streamable_http_client(server.url, http_client=http)) as client:
                yield client


async def connect(server: McpServer, extra_env: dict[str, str] | None = None) -> McpConnection:
    """An open session with `server`; McpUnreachable when it cannot be had."""
    connection = McpConnection(server, extra_env)
    await connection.open()
    return connection


class _SessionGone(McpToolError):
    """The server's side of the session is gone (its process exited, its connection closed)."""


def _reason(exc: BaseException) -> str:
    """The first cause, out of the task groups the client raises through."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return str(exc) or type(exc).__name__
