"""Berth's SDK: declare agents and tools, submit tasks under budgets, follow and steer them.

    from sdk import Agent, tool, Budget, Client
"""

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
from ._spec import AgentSpec, CheckpointRef, ForkSource, TaskRun, TaskSpec, ToolSpec
from ._serve import serve, serve_blocking
from ._sync import SyncClient, SyncTaskHandle
from ._state import FINAL_STATUSES, Spend, TaskEvent, TaskState, TaskStatus
from ._tool import Tool, ToolCallContext, tool, tool_context

__all__ = [
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
    "ForkSource",
    "InvalidSpec",
    "McpServer",
    "McpUnreachable",
    "Message",
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
