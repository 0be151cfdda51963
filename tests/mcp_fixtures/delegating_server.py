"""An MCP server an agent runs with `berth_token`: its one tool hands a subject to a research sub-agent
through Berth, with the token of the task that called it, so the sub-agent is paid from that task's budget."""

from __future__ import annotations

import os
import sys

from mcp.server.mcpserver import MCPServer

from sdk import Client

server = MCPServer("hand")
CHILD_TOKENS = 4000


@server.tool()
async def delegate(subject: str) -> str:
    """Have a research sub-agent look into a subject; returns its task id and answer."""
    async with Client(os.environ["BERTH_API_URL"], os.environ["BERTH_API_KEY"]) as berth:
        child = await berth.submit("research", subject, budget=CHILD_TOKENS)
        answer = await child.result(timeout=120)
    return f"{child.task_id}: {answer[:300]}"


if __name__ == "__main__":
    sys.exit(server.run())
