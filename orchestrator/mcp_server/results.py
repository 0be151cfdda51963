"""What the tools answer: pydantic models, so MCP publishes an output schema and a structured result.

A tool whose answer is a list gets a model with one named field: MCP's structured content
is a JSON object, and a named field reads better to a model than the `result` wrapper MCP
would otherwise invent.
"""

from __future__ import annotations

from collections import Counter

from pydantic import BaseModel, Field

from sdk import AgentSpec, CatalogueModel, NodeView, TaskState
from sdk.wire.fleet import Capacity, NodeStatus


class TaskList(BaseModel):
    tasks: list[TaskState] = Field(description="newest first")


class WaitOutcome(BaseModel):
    state: TaskState = Field(description="the final state, or the current one when the wait timed out")
    timed_out: bool = Field(description="true when the task was still running when the wait ended")


class AgentList(BaseModel):
    agents: list[AgentSpec]


class ModelList(BaseModel):
    models: list[CatalogueModel] = Field(description="the model catalogue, each entry with its scaling policy")


class NodeSummary(BaseModel):
    """One node in a line: where it is, whether it takes work, what its GPUs hold."""

    node_id: str
    datacenter: str
    zone: str
    capacity: Capacity
    status: NodeStatus
    gpus: list[str] = Field(description='GPU types with counts, e.g. "2xH100-80GB"')
    healthy_gpus: int
    replicas: list[str] = Field(description='models loaded on the node with their state, e.g. "llama-3.1-8b (warm)"')

    @classmethod
    def of(cls, node: NodeView) -> NodeSummary:
        types = Counter(g.type_name for g in node.gpus)
        return cls(
            node_id=node.node_id,
            datacenter=node.datacenter,
            zone=node.zone,
            capacity=node.capacity,
            status=node.status,
            gpus=[f"{n}x{t}" for t, n in sorted(types.items())],
            healthy_gpus=sum(g.healthy for g in node.gpus),
            replicas=[f"{r.model} ({r.state})" for r in node.replicas],
        )


class FleetStatus(BaseModel):
    nodes: list[NodeSummary]
    nodes_by_status: dict[str, int] = Field(description="how many nodes are healthy, unhealthy, draining, lost")
    gpus: int
    healthy_gpus: int
    replicas_by_state: dict[str, int] = Field(description="how many replicas are loading, warm, draining")

    @classmethod
    def of(cls, nodes: list[NodeView]) -> FleetStatus:
        summaries = [NodeSummary.of(n) for n in nodes]
        return cls(
            nodes=summaries,
            nodes_by_status=dict(Counter(n.status for n in nodes)),
            gpus=sum(len(n.gpus) for n in nodes),
            healthy_gpus=sum(s.healthy_gpus for s in summaries),
            replicas_by_state=dict(Counter(r.state for n in nodes for r in n.replicas)),
        )
