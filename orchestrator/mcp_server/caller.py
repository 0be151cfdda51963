"""Who a tool call acts for: a Berth `Client` holding the caller's own key, and refusals as MCP errors.

Tools never reach the store or Temporal themselves; they call /v1 as the caller would, so no
rule of the API (roles, tenants, budgets, the audit trail) has a second implementation here.
A refusal of the API (an SDK exception) leaves as the MCP error the tool or resource must
raise, worded "<kind>: <field>: <reason>" so a model can tell what to fix.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

from mcp.server.mcpserver.exceptions import MCPServerError

from sdk import ApiUnreachable, BerthError, Client, Conflict, InvalidSpec, NotFound, Unauthorized

# How a tool gets a Client for the current caller: a fixed one over stdio, one per HTTP request's key.
ClientFactory = Callable[[], AbstractAsyncContextManager[Client]]

_KINDS: tuple[tuple[type[BerthError], str], ...] = (
    (InvalidSpec, "invalid"),
    (NotFound, "not found"),
    (Conflict, "conflict"),
    (Unauthorized, "refused"),
    (ApiUnreachable, "unavailable"),
)


def refusal_text(exc: BerthError) -> str:
    """ "not found: task_id: task 'x' does not exist": the kind first, so a caller can branch on it."""
    kind = next((word for cls, word in _KINDS if isinstance(exc, cls)), "error")
    reason = " ".join(exc.message.split())
    return f"{kind}: {exc.field}: {reason}" if exc.field else f"{kind}: {reason}"


class Caller:
    """Opens the caller's Client for one tool call or resource read."""

    def __init__(self, clients: ClientFactory) -> None:
        self._clients = clients

    @asynccontextmanager
    async def client(self, refusal: type[MCPServerError]) -> AsyncIterator[Client]:
        """The caller's Client; an SDK refusal inside the block is raised again as `refusal` (ToolError for a
        tool, which MCP answers as an isError result; ResourceError for a resource read)."""
        async with self._clients() as client:
            try:
                yield client
            except BerthError as exc:
                raise refusal(refusal_text(exc)) from exc
