"""An agent's MCP tools in its tool worker: found when the worker starts, called by its activities.

Discovery happens before the agent is registered, and a server that cannot be reached
stops the worker: an agent registered without some of its tools would offer the model less
than its author declared. Each call gets the activity's idempotency key in its `_meta`, and
fails the way a native tool fails (an exception, retried by Temporal, then shown to the model).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING

from ._errors import InvalidSpec, McpToolError
from ._mcp_server import IDLE_CLOSE_S, BerthAccess, McpServer
from ._spec import ToolSpec
from ._tool import ToolArgumentError
from .wire.contracts import ToolCallInput

if TYPE_CHECKING:
    from mcp_types import CallToolResult
    from mcp_types import Tool as McpTool

    from ._mcp_connection import McpConnection
    from ._mcp_task_sessions import TaskSessions

# What OpenAI accepts as a function name; other providers accept at least this.
TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
SEPARATOR = "__"


def mcp_tool_name(server: str, tool: str) -> str:
    """The name the model calls a server's tool by; InvalidSpec when no model could call it."""
    name = f"{server}{SEPARATOR}{tool}"
    if not tool or not TOOL_NAME.match(name):
        raise InvalidSpec(
            f"MCP server {server!r} offers the tool {tool!r}, whose name {name!r} a model cannot call"
            " (only A-Z, a-z, 0-9, _ and -, 64 characters at most)",
            field=f"mcp_servers.{server}.tools.{tool}",
        )
    return name


def result_text(result: CallToolResult) -> str:
    """What the model reads: the text a server wrote for it, or its structured result as JSON."""
    parts, texts = [], 0
    for block in result.content:
        # A text block, or an embedded text resource; images and audio are named, not shown.
        text = getattr(block, "text", getattr(getattr(block, "resource", None), "text", None))
        texts += isinstance(text, str)
        parts.append(text if isinstance(text, str) else f"[{block.type} content]")
    if not texts and result.structured_content is not None:
        return json.dumps(result.structured_content, default=str)
    return "\n".join(parts)


@dataclass(frozen=True)
class _Route:
    server: McpServer
    tool: str  # its name on the server


class McpToolbox:
    """The tools of an agent's MCP servers, as ToolSpecs to register and as calls to route.

    A server's session is opened once and kept for the worker's lifetime, except a
    `berth_token` server's, which is per task (`TaskSessions`).
    """

    def __init__(
        self,
        servers: Iterable[McpServer],
        *,
        native_tools: Iterable[str] = (),
        berth: BerthAccess | None = None,
        idle_close_s: float = IDLE_CLOSE_S,
    ) -> None:
        self.servers = list(servers)
        self.specs: list[ToolSpec] = []
        self._native = set(native_tools)
        self._berth = berth
        self._idle_close_s = idle_close_s
        self._routes: dict[str, _Route] = {}
        self._shared: dict[str, McpConnection] = {}
        self._per_task: TaskSessions | None = None

    def __contains__(self, name: object) -> bool:
        return name in self._routes

    @property
    def names(self) -> list[str]:
        return list(self._routes)

    async def __aenter__(self) -> McpToolbox:
        if not self.servers:
            return self
        # Imported here: the MCP client takes most of a second to import, which `import sdk` (every CLI
        # command, every workflow worker) should not pay for agents that have no MCP server.
        from ._mcp_connection import connect
        from ._mcp_task_sessions import TaskSessions

        try:
            async with asyncio.TaskGroup() as group:  # servers start in parallel; one failing stops the others
                found = [group.create_task(self._discover(server, connect)) for server in self.servers]
        except BaseExceptionGroup as failed:
            await self.aclose()
            raise failed.exceptions[0] from None
        except BaseException:
            await self.aclose()
            raise
        for server, tools in zip(self.servers, found):
            for tool in tools.result():
                self._add(server, tool)
        if self._berth is not None and any(s.berth_token for s in self.servers):
            self._per_task = TaskSessions(self._berth, self._idle_close_s)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        shared, self._shared = list(self._shared.values()), {}
        per_task, self._per_task = self._per_task, None
        await asyncio.gather(*(c.close() for c in shared), *([per_task.aclose()] if per_task else []))

    async def call(self, call: ToolCallInput) -> str:
        """Run the call on its server; McpToolError when the server answers with an error."""
        route = self._routes[call.name]
        try:
            arguments = json.loads(call.arguments or "{}")
        except json.JSONDecodeError as exc:
            raise ToolArgumentError(f"arguments are not valid JSON: {exc.msg}") from exc
        if not isinstance(arguments, dict):
            raise ToolArgumentError("arguments must be a JSON object")
        async with self._session(route.server, call.task_id) as connection:
            result = await connection.call(
                route.tool, arguments, idempotency_key=call.idempotency_key, timeout_s=route.server.timeout_s
            )
        if result.is_error:
            raise McpToolError(result_text(result) or f"{call.name} reported an error without a message")
        return result_text(result)

    async def _discover(
        self, server: McpServer, connect: Callable[[McpServer, dict[str, str] | None], Awaitable[McpConnection]]
    ) -> list[McpTool]:
        if not server.berth_token:
            self._shared[server.name] = await connect(server, None)
            return await self._shared[server.name].list_tools()
        if self._berth is None:
            raise InvalidSpec(
                f"MCP server {server.name!r} asks for a task token (berth_token), but this tool worker"
                " has no Berth API to get one from",
                field=f"mcp_servers.{server.name}.berth_token",
            )
        connection = await connect(server, self._berth.env(self._berth.own_key))
        try:
            return await connection.list_tools()
        finally:
            await connection.close()  # each task gets its own, holding its own token

    def _add(self, server: McpServer, tool: McpTool) -> None:
        name = mcp_tool_name(server.name, tool.name)
        clash = f"the agent's own tool {name!r}" if name in self._native else None
        if name in self._routes:
            other = self._routes[name]
            clash = f"tool {other.tool!r} of MCP server {other.server.name!r}"
        if clash:
            raise InvalidSpec(
                f"MCP server {server.name!r} offers the tool {tool.name!r} as {name!r}, which is already {clash}",
                field=f"mcp_servers.{server.name}.tools.{tool.name}",
            )
        self._routes[name] = _Route(server, tool.name)
        self.specs.append(
            ToolSpec(
                name=name,
                description=tool.description or tool.title or "",
                parameters=tool.input_schema,
                timeout_s=server.timeout_s,
                max_attempts=server.max_attempts,
            )
        )

    @contextlib.asynccontextmanager
    async def _session(self, server: McpServer, task_id: str) -> AsyncIterator[McpConnection]:
        if server.berth_token:
            assert self._per_task is not None
            async with self._per_task.session(server, task_id) as connection:
                yield connection
        else:
            yield self._shared[server.name]
