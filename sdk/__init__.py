"""Berth's SDK: declare agents and tools, submit tasks under budgets, follow and steer them.

    from sdk import Agent, tool, Budget, Client

`serve` and `serve_blocking` (a tool worker: Temporal's worker and the MCP client) load on first use, so a
script or CLI that only submits and follows tasks never imports them.
"""

from typing import TYPE_CHECKING, Any

from ._agent import Agent
from ._budget import Budget
from ._catalogue import CatalogueModel, ModelEntry, PrewarmRequest, PrewarmStarted, PrewarmTarget, ScalingPolicy
from ._fleet import (
    CachedModelWeights,
    GpuDescription,
    GpuHealth,
    GpuView,
    MigDeviceDescription,
    NodeAdmission,
    NodeHeartbeat,
    NodeRegistered,
    NodeRegistration,
    NodeRevocation,
    NodeSpec,
    NodeView,
    ReplicaReport,
    ReplicaView,
)
from ._client import ApiUnreachable, Client, TaskHandle
from ._errors import (
    BerthError,
    BudgetExhausted,
    Conflict,
    Forbidden,
    InvalidSpec,
    McpUnreachable,
    NotFound,
    TaskCancelled,
    TaskEnded,
    TaskFailed,
    Unauthorized,
)
from ._identity import ApiKeyView, AuditEntry, CreatedKey, Role, Tenant, TenantSpec, TenantUpdate, Trust
from ._mcp_server import McpServer
from ._messages import Message, ToolCall
from ._resources import CheckpointDetail, CheckpointSummary, Ledger
from ._settings import ModelSettings
from ._spec import AgentSpec, CheckpointRef, ForkSource, TaskRun, TaskSpec, ToolSpec
from ._sync import SyncClient, SyncTaskHandle
from ._state import FINAL_STATUSES, Spend, TaskEvent, TaskState, TaskStatus
from ._stream import (BudgetWaiting, Ended, Interrupted, ModelCalled, StateChanged, StepFinished, StreamEvent,
                      TokenDelta, Writing)
from ._tool import Tool, ToolCallContext, tool, tool_context

__all__ = [
    "TokenDelta",
    "Writing",
    "StreamEvent",
    "StepFinished",
    "StateChanged",
    "ModelCalled",
    "Interrupted",
    "Ended",
    "BudgetWaiting",
    "ApiKeyView",
    "AuditEntry",
    "CreatedKey",
    "Role",
    "Tenant",
    "TenantSpec",
    "TenantUpdate",
    "Trust",
    "CachedModelWeights",
    "GpuDescription",
    "GpuHealth",
    "GpuView",
    "MigDeviceDescription",
    "NodeAdmission",
    "NodeHeartbeat",
    "NodeRegistered",
    "NodeRegistration",
    "NodeRevocation",
    "NodeSpec",
    "NodeView",
    "ReplicaReport",
    "ReplicaView",
    "CatalogueModel",
    "ModelEntry",
    "PrewarmRequest",
    "PrewarmStarted",
    "PrewarmTarget",
    "ScalingPolicy",
    "ApiUnreachable",
    "CheckpointDetail",
    "CheckpointSummary",
    "Client",
    "Ledger",
    "SyncClient",
    "SyncTaskHandle",
    "TaskHandle",
    "Agent",
    "Tool",
    "ToolCallContext",
    "serve",
    "serve_blocking",
    "tool",
    "tool_context",
    "AgentSpec",
    "BerthError",
    "Budget",
    "BudgetExhausted",
    "CheckpointRef",
    "Conflict",
    "FINAL_STATUSES",
    "Forbidden",
    "ForkSource",
    "InvalidSpec",
    "McpServer",
    "McpUnreachable",
    "Message",
    "ModelSettings",
    "NotFound",
    "Spend",
    "TaskCancelled",
    "TaskEnded",
    "TaskEvent",
    "TaskFailed",
    "TaskRun",
    "TaskSpec",
    "TaskState",
    "TaskStatus",
    "ToolCall",
    "ToolSpec",
    "Unauthorized",
]

_SERVING = ("serve", "serve_blocking")

if TYPE_CHECKING:
    from ._serve import serve, serve_blocking


def __getattr__(name: str) -> Any:
    if name in _SERVING:
        from . import _serve

        return getattr(_serve, name)
    raise AttributeError(f"module 'sdk' has no attribute {name!r}")
