"""The one MCPServer both transports serve."""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer

from .caller import Caller, ClientFactory
from .resources import register_resources
from .tools import register_tools

INSTRUCTIONS = (
    "Berth runs AI-agent tasks durably under hard token budgets. Submit a task to an agent (list_agents) with a"
    " budget, follow it with wait_for_task or get_task, and steer it: raise_budget when it is awaiting_budget,"
    " answer_task when it is awaiting_input (approve_tool_call or reject_tool_call when its `approvals` lists tool"
    " calls waiting for a person), cancel_task, fork_task from a checkpoint."
)


def build_server(clients: ClientFactory) -> MCPServer:
    """The tools and resources, acting through the Clients `clients` opens (one per call)."""
    server = MCPServer("berth", instructions=INSTRUCTIONS, version="0.1.0")
    caller = Caller(clients)
    register_tools(server, caller)
    register_resources(server, caller)
    return server
