"""The resources: a task's state, one of its checkpoints, the fleet's nodes, as JSON documents.

Read through the caller's Client like the tools, so another tenant's task is "not found"
here too; a refusal is a ResourceError, which MCP answers as an error carrying its text.
"""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError
from pydantic import TypeAdapter

from sdk import NodeView

from .caller import Caller

JSON = "application/json"
_NODES = TypeAdapter(list[NodeView])


def register_resources(server: MCPServer, caller: Caller) -> None:
    """Add the task, checkpoint and fleet resources to `server`; each read acts as `caller`."""

    @server.resource(
        "task://{task_id}", name="task", mime_type=JSON, description="a task's state: status, step, spend, result"
    )
    async def task_state(task_id: str) -> str:
        async with caller.client(ResourceError) as client:
            return (await client.task(task_id).status()).model_dump_json()

    @server.resource(
        "task://{task_id}/checkpoints/{seq}",
        name="checkpoint",
        mime_type=JSON,
        description="one checkpoint of a task: its conversation up to there, scratch and state",
    )
    async def checkpoint(task_id: str, seq: str) -> str:
        if not (seq.isascii() and seq.isdigit()):
            raise ResourceError(f"invalid: seq: a checkpoint number is a whole number >= 0, not {seq!r}")
        async with caller.client(ResourceError) as client:
            return (await client.task(task_id).checkpoint(int(seq))).model_dump_json()

    @server.resource(
        "fleet://nodes",
        name="nodes",
        mime_type=JSON,
        description="every GPU node: GPUs with their health, cached weights, replicas, status",
    )
    async def nodes() -> str:
        async with caller.client(ResourceError) as client:
            return _NODES.dump_json(await client.nodes()).decode()
