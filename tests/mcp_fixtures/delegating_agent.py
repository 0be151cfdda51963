"""`berth worker --agents tests.mcp_fixtures.delegating_agent:AGENT`: an agent whose MCP server delegates."""

from __future__ import annotations

import sys
from pathlib import Path

from sdk import Agent, McpServer

ROOT = Path(__file__).resolve().parents[2]

AGENT = Agent(
    "delegator",
    "llama-3.2-1b",
    "Hand each subject to a sub-agent, then sum up.",
    mcp_servers=[
        McpServer(
            name="hand",
            command=[sys.executable, str(Path(__file__).with_name("delegating_server.py"))],
            cwd=str(ROOT),
            env={"PYTHONPATH": str(ROOT)},
            berth_token=True,
        )
    ],
)
