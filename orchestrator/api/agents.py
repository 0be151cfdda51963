"""Agent routes: register a version, list the current ones, read one.

An agent's name belongs to the tenant whose key registered it first (every tenant's when a
key of no tenant did): a tenant's key sees only its own and the shared ones, and changes only
its own — another tenant's agent is as unknown to it as one never registered.
"""

from __future__ import annotations

from fastapi import APIRouter, Response, status

from sdk import AgentSpec

from .auth import AgentRegistrar, Caller
from .errors import ERROR_RESPONSES, ApiError, not_found
from .services import Svc
from .submission import check_model

router = APIRouter(prefix="/v1/agents", tags=["agents"], responses=ERROR_RESPONSES)


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=AgentSpec,
    responses={200: {"model": AgentSpec, "description": "this content was already the current version"}},
)
async def register(spec: AgentSpec, response: Response, svc: Svc, caller: AgentRegistrar) -> AgentSpec:
    """Register an agent; its version is the hash of its content, so re-registering is a no-op (200)."""
    registered, owner = await svc.db(svc.store.agents.owner, spec.name)
    current = await svc.db(svc.store.agents.get, spec.name)
    changes = current is None or current.version != spec.content_version()
    if registered and changes and caller.tenant is not None and owner != caller.tenant:
        # Registering the same content again (a shared agent's tool worker starting) changes nothing.
        raise ApiError(
            403,
            f"agent {spec.name!r} is registered by another tenant (or for all of them); choose another name",
            field="name",
        )
    await check_model(svc, spec.model)
    stored = await svc.db(svc.store.agents.register, spec, caller.tenant)
    if current is not None and current.version == stored.version:
        response.status_code = status.HTTP_200_OK
    return stored


@router.get("", response_model=list[AgentSpec])
async def list_agents(svc: Svc, caller: Caller) -> list[AgentSpec]:
    """The current version of every registered agent the caller may see."""
    return await svc.db(svc.store.agents.list, caller.tenant)


@router.get("/{name}", response_model=AgentSpec)
async def get_agent(name: str, svc: Svc, caller: Caller) -> AgentSpec:
    agent = await svc.db(svc.store.agents.get, name, None, caller.tenant)
    if agent is None:
        raise not_found(f"agent {name!r} is not registered", field="name")
    return agent
