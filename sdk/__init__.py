"""Berth's SDK: declare agents and tools, submit tasks under budgets, follow and steer them.

    from sdk import Agent, tool, Budget, Client

What needs an HTTP client, an MCP client or a JSON-schema validator (`Client`, `SyncClient`, their handles,
`Agent`, `McpServer`, and `serve`, `serve_blocking`, `tool_worker`: Temporal's worker) loads on first use, so
Berth's workflows, which read only the SDK's types, never import them (a test keeps it so), and a script that
only submits and follows tasks never imports a worker.

What is in `__all__` is the author's surface. `sdk.wire` is the wire between Berth's own processes (node
heartbeats, leases, step books, the workflow's input): not for authors, and free to change with the control
plane. The `sdk._*` modules are private to this package.
"""

import importlib
from typing import TYPE_CHECKING, Any

from ._budget import Budget
from ._errors import (
    BerthError,
    BudgetExhausted,
    Conflict,
    Forbidden,
    InvalidSpec,
    McpUnreachable,
    NotFound,
    SecretSettingRefused,
    TaskCancelled,
    TaskEnded,
    TaskFailed,
    Unauthorized,
)
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
    "SecretSettingRefused",
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

# Each name that loads on first use, and the module that defines it.
_ON_FIRST_USE = {
    "Agent": "_agent",
    "ApiUnreachable": "_client",
    "Client": "_client",
    "TaskHandle": "_client",
    "McpServer": "_mcp_server",
    "SyncClient": "_sync",
    "SyncTaskHandle": "_sync",
    "serve": "_serve",
    "serve_blocking": "_serve",
    "tool_worker": "_serve",
}

if TYPE_CHECKING:
    from ._agent import Agent
    from ._client import ApiUnreachable, Client, TaskHandle
    from ._mcp_server import McpServer
    from ._serve import serve, serve_blocking, tool_worker
    from ._sync import SyncClient, SyncTaskHandle


def __getattr__(name: str) -> Any:
    module = _ON_FIRST_USE.get(name)
    if module is None:
        raise AttributeError(f"module 'sdk' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # later reads skip this hook
    return value
