"""Agent routes: register a version, list the current ones, read one."""

from __future__ import annotations

from fastapi import APIRouter, Response, status

from sdk import AgentSpec

from .auth import AgentRegistrar
from .errors import ERROR_RESPONSES, not_found
from .services import Svc
from .submission import check_model

router = APIRouter(prefix="/v1/agents", tags=["agents"], responses=ERROR_RESPONSES)


@router.post("", status_code=status.HTTP_201_CREATED, response_model=AgentSpec,
             responses={200: {"model": AgentSpec, "description": "this content was already the current version"}})
async def register(spec: AgentSpec, response: Response, svc: Svc, _caller: AgentRegistrar) -> AgentSpec:
    """Register an agent; its version is the hash of its content, so re-registering is a no-op (200)."""
    await check_model(svc, spec.model)
    current = await svc.db(svc.store.agents.get, spec.name)
    stored = await svc.db(svc.store.agents.register, spec)
    if current is not None and current.version == stored.version:
        response.status_code = status.HTTP_200_OK
    return stored


@router.get("", response_model=list[AgentSpec])
async def list_agents(svc: Svc) -> list[AgentSpec]:
    """The current version of every registered agent."""
    return await svc.db(svc.store.agents.list)


@router.get("/{name}", response_model=AgentSpec)
async def get_agent(name: str, svc: Svc) -> AgentSpec:
    agent = await svc.db(svc.store.agents.get, name)
    if agent is None:
        raise not_found(f"agent {name!r} is not registered", field="name")
    return agent
