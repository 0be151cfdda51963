"""Berth's SDK: declare agents and tools, submit tasks under budgets, follow and steer them.

    from sdk import Agent, tool, Budget, Client

`serve`, `serve_blocking` and `tool_worker` (a tool worker: Temporal's worker and the MCP client) load on
first use, so a script or CLI that only submits and follows tasks never imports them.

What is in `__all__` is the author's surface. `sdk.wire` is the wire between Berth's own processes (node
heartbeats, leases, step books, the workflow's input): not for authors, and free to change with the control
plane. The `sdk._*` modules are private to this package.
"""

from typing import TYPE_CHECKING, Any

from ._agent import Agent
from ._budget import Budget
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
from ._mcp_server import McpServer
from ._messages import Message, ToolCall
from ._settings import ModelSettings
from ._spec import AgentSpec, CheckpointRef, ForkSource, TaskSpec, ToolSpec
from ._state import FINAL_STATUSES, GpuTrouble, Spend, Stuck, TaskEvent, TaskState, TaskStatus
from ._stream import (
    BudgetWaiting,
    Ended,
    Interrupted,
    ModelCalled,
    StateChanged,
    StepFinished,
    StreamEvent,
    TextReset,
    TokenDelta,
    Writing,
)
from ._sync import SyncClient, SyncTaskHandle
from ._tool import Tool, ToolCallContext, tool, tool_context
from .wire.catalogue import CatalogueModel, ModelEntry, PrewarmRequest, PrewarmStarted, PrewarmTarget, ScalingPolicy
from .wire.fleet import (
    GpuHealth,
    GpuView,
    NodeAdmission,
    NodeRevocation,
    NodeView,
    ReplicaView,
)
from .wire.identity import ApiKeyView, AuditEntry, CreatedKey, Role, Tenant, TenantSpec, TenantUpdate, Trust
from .wire.objectives import LatencyObjectives
from .wire.resources import CheckpointDetail, CheckpointSummary, Ledger

__all__ = [
    "TokenDelta",
    "TextReset",
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
    "GpuHealth",
    "GpuView",
    "NodeAdmission",
    "NodeRevocation",
    "NodeView",
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
    "tool_worker",
    "tool",
    "tool_context",
    "AgentSpec",
    "BerthError",
    "Budget",
    "BudgetExhausted",
    "CheckpointRef",
    "Conflict",
    "FINAL_STATUSES",
    "GpuTrouble",
    "Forbidden",
    "LatencyObjectives",
    "ForkSource",
    "InvalidSpec",
    "McpServer",
    "McpUnreachable",
    "Message",
    "ModelSettings",
    "NotFound",
    "Spend",
    "Stuck",
    "TaskCancelled",
    "TaskEnded",
    "TaskEvent",
    "TaskFailed",
    "TaskSpec",
    "TaskState",
    "TaskStatus",
    "ToolCall",
    "ToolSpec",
    "Unauthorized",
]

_SERVING = ("serve", "serve_blocking", "tool_worker")

if TYPE_CHECKING:
    from ._serve import serve, serve_blocking, tool_worker


def __getattr__(name: str) -> Any:
    if name in _SERVING:
        from . import _serve

        return getattr(_serve, name)
    raise AttributeError(f"module 'sdk' has no attribute {name!r}")
