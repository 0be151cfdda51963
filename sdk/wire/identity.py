"""Who may call the API: tenants, API keys and their roles, and the audit log of what they did.

The API serves these shapes and the SDK (and `berth keys|tenants`) parses them, so they live
here, beside the other resources both sides share.
"""

from __future__ import annotations

from datetime import datetime
from enum import Enum

from pydantic import BaseModel, ConfigDict, Field

from .limits import MAX_TOKEN_BUDGET, MAX_USD_BUDGET, NAME_PATTERN, numbers_not_booleans
from .objectives import LatencyObjectives

API_KEY_ENV = "BERTH_API_KEY"  # where a client, the CLI and a tool worker find their key when given none


DEFAULT_TENANT = "default"
# `berth_<key id>_<secret>`: the id is readable from the key, so a log line or an audit row can
# name a key without holding its secret.
KEY_PREFIX = "berth_"


class Role(str, Enum):
    """What a key may do. `agent` keys belong to one tenant; operator and viewer keys may."""

    admin = "admin"  # everything, every tenant, and tenants, keys and the audit log
    operator = "operator"  # tasks of its scope, and the fleet and models
    viewer = "viewer"  # reads only
    agent = "agent"  # its own tenant's tasks, and registering agents (tool workers do)


class Trust(str, Enum):
    """How far a tenant's work may share hardware with other tenants' (see the pool's placement)."""

    shared = "shared"
    isolated = "isolated"
    dedicated = "dedicated"


class TenantUpdate(BaseModel):
    """A change to a tenant; only the fields sent change, and null clears an optional limit."""

    model_config = ConfigDict(extra="forbid")

    trust: Trust | None = None
    gpu_quota: int | None = Field(default=None, ge=0, le=100_000, description="GPUs the tenant may hold at once")
    default_budget_tokens: int | None = Field(
        default=None, gt=0, le=MAX_TOKEN_BUDGET, description="the token budget of a task submitted without one"
    )
    default_budget_usd: float | None = Field(
        default=None, gt=0, le=MAX_USD_BUDGET, description="the dollar limit of a task submitted without one"
    )
    objectives: LatencyObjectives | None = Field(
        default=None,
        description="latency objectives of the tenant's tasks, over their service class's defaults field by field"
        " (an agent's and a task's own win over these); an update changes the fields it sends, and null clears"
        " one (or, for the whole object, all of them)",
    )

    _numbers = numbers_not_booleans("gpu_quota", "default_budget_tokens", "default_budget_usd")


class TenantSpec(TenantUpdate):
    """A tenant as an admin creates it."""

    name: str = Field(pattern=NAME_PATTERN)
    trust: Trust = Trust.shared


class Tenant(TenantSpec):
    model_config = ConfigDict(extra="ignore")

    created_at: datetime
    updated_at: datetime


class KeyRequest(BaseModel):
    """A new API key: its role, its tenant where the role has one, and a name to recognise it by."""

    model_config = ConfigDict(extra="forbid")

    role: Role
    tenant: str | None = Field(
        default=None,
        pattern=NAME_PATTERN,
        description="required for agent keys; scopes operator and viewer keys; none for admin keys",
    )
    name: str = Field(default="", max_length=100)
    description: str = Field(default="", max_length=1000)


def tenant_problem(role: Role, tenant: str | None) -> str | None:
    """Why `tenant` does not fit a key of `role`, or None; a function so the API and the CLI say the same."""
    if role == Role.agent and tenant is None:
        return "an agent key belongs to one tenant; name it"
    if role == Role.admin and tenant is not None:
        return "an admin key acts on every tenant; it takes no tenant"
    return None


class ApiKeyView(BaseModel):
    """A key as listed: never its secret, nor the secret's hash."""

    key_id: str
    role: Role
    tenant: str | None
    name: str
    description: str
    created_at: datetime
    revoked_at: datetime | None = None
    last_used_at: datetime | None = None
    task_id: str | None = Field(default=None, description="a task token: the task it acts for (its own budget only)")


class CreatedKey(ApiKeyView):
    """The answer to creating a key: the only time its secret is shown."""

    key: str = Field(description="the whole key to send as `Authorization: Bearer <key>`; shown only now")


class AuditEntry(BaseModel):
    """One state-changing request: who sent it, what it asked, when, and how it was answered."""

    id: int
    at: datetime
    key_id: str | None = Field(description="the key that sent it; null when no valid key was presented")
    role: Role | None
    tenant: str | None
    method: str
    path: str
    target: str | None = Field(description="what it acted on (a task, node, model, tenant or key)")
    status: int = Field(description="the HTTP status it was answered with")
