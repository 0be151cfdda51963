"""Authentication and roles: every user route of /v1 needs an API key, sent as a bearer token.

`authenticate` is hung on each user router in app.py, so a route cannot be added without
it; node agents' routes (join, heartbeat, step books) are the exception, guarded by the join
token and node secrets instead. Routes that need more than reading name the roles they
allow with `allow`. A task token is held to a short list of what its task may do (below):
anything not on it is refused here, so a route added later is closed to task tokens until it
is put on the list. The caller is left in the request's scope for the audit middleware,
which logs who sent each write. A route's `{task_id}` is read as the caller means it (a tenant's
bare chosen id is its task's full id) here too, so every task route takes the same ids.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from sdk import Unauthorized

from .errors import ApiError
from .principal import ADMINS, FLEET_READERS, OPERATORS, TASK_WRITERS, Principal, Role
from .services import Services, services

PRINCIPAL_SCOPE_KEY = "berth.principal"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_CHALLENGE = {"WWW-Authenticate": "Bearer"}

_bearer = HTTPBearer(auto_error=False, description="an API key: `berth keys create`, or <data_dir>/admin-key")

# What a task token may do: read its own task's tree (and the agents and models it may start sub-agents of),
# submit sub-agents, and spawn or cancel within its tree. Raising a budget or forking would be money from
# nowhere, answering its own question would open its own human gate, registering an agent would rewrite a
# prompt every task of the tenant runs: none of them is its task's to do.
TASK_TOKEN_READS = ("/v1/tasks", "/v1/agents", "/v1/models")
TASK_TOKEN_WRITES = frozenset(
    {("POST", "/v1/tasks"), ("POST", "/v1/tasks/{task_id}/spawn"), ("POST", "/v1/tasks/{task_id}/cancel")}
)
# A task token may drive its own task's own loop (its model calls, its tool results, its end), so a loop's
# process can hold a credential that spends no more than its task's budget; never another task's loop, and
# never a decision on its own tool calls that wait for a person.
TASK_TOKEN_OWN_LOOP = frozenset(
    {
        ("POST", "/v1/tasks/{task_id}/chat/completions"),
        ("POST", "/v1/tasks/{task_id}/responses"),
        ("PUT", "/v1/tasks/{task_id}/tool-results/{call_id}"),
        ("POST", "/v1/tasks/{task_id}/finish"),
    }
)


async def authenticate(
    request: Request,
    svc: Annotated[Services, Depends(services)],
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    """The caller of a valid key; 401 without one, 403 for a viewer's write (viewers only read)."""
    if credentials is None or not credentials.credentials.strip():
        raise ApiError(
            401, "an API key is required: send `Authorization: Bearer <key>`", field="authorization", headers=_CHALLENGE
        )
    try:
        holder = await svc.db(svc.store.keys.authenticate, credentials.credentials.strip())
    except Unauthorized as exc:
        raise ApiError(401, exc.message, field="authorization", headers=_CHALLENGE) from None
    caller = Principal(key_id=holder.key_id, role=holder.role, tenant=holder.tenant, task_id=holder.task_id)
    request.scope[PRINCIPAL_SCOPE_KEY] = caller
    if caller.role == Role.viewer and request.method not in SAFE_METHODS:
        raise forbidden(caller, "change anything")
    await read_task_id_as_meant(request, svc, caller)
    if caller.task_id is not None:
        _hold_task_token_to_its_task(caller, request)
    return caller


async def read_task_id_as_meant(request: Request, svc: Services, caller: Principal) -> None:
    """Put the task the caller means in the path's `{task_id}`, before any check or route reads it: a bare
    chosen id (`X` for `<tenant>:X`) then works on every task route, present and future, with no route's
    author having to remember it. FastAPI reads a route's path parameters after its dependencies run, so
    the UI's sign-in dependency does the same for its pages."""
    given = request.path_params.get("task_id")
    if given is not None:
        request.path_params["task_id"] = await svc.task_id_meant(given, caller)


def _hold_task_token_to_its_task(caller: Principal, request: Request) -> None:
    """403 for whatever a task token's task may not do (TASK_TOKEN_READS, TASK_TOKEN_WRITES)."""
    assert caller.task_id is not None
    route = request.scope.get("route")
    path = getattr(route, "path", request.url.path)
    if request.method in SAFE_METHODS and path.startswith(TASK_TOKEN_READS):
        return
    if (request.method, path) in TASK_TOKEN_OWN_LOOP and request.path_params.get("task_id") == caller.task_id:
        return
    if (request.method, path) in TASK_TOKEN_WRITES:
        target = request.path_params.get("task_id")
        # It may stop its sub-agents, not itself: its task ends by its own agent's answer, or by a person.
        if not (path.endswith("/cancel") and target == caller.task_id):
            return
    raise ApiError(
        403,
        f"API key {caller.key_id} is the token of task {caller.task_id}: it may submit sub-agents out"
        " of that task's budget, cancel them, read its own tree and drive its own task's own loop, nothing else",
        field="authorization",
    )


def allow(roles: frozenset[Role], action: str, *, fleet_wide: bool = False) -> Callable[..., Awaitable[Principal]]:
    """A dependency that lets through only callers of `roles`; `action` words the 403.

    `fleet_wide`: the action changes what every tenant shares (a node, a scaling policy, the
    catalogue), so a key confined to one tenant may not take it, whatever its role."""

    async def check(caller: Annotated[Principal, Depends(authenticate)]) -> Principal:
        refusal = refusal_of(caller, roles, action, fleet_wide=fleet_wide)
        if refusal is not None:
            raise refusal
        return caller

    return check


def refusal_of(caller: Principal, roles: frozenset[Role], action: str, *, fleet_wide: bool = False) -> ApiError | None:
    """The 403 for `caller` taking `action`, or None when it may (the UI asks this to grey out its buttons)."""
    if caller.role not in roles:
        return forbidden(caller, action)
    if fleet_wide and caller.tenant is not None:
        return ApiError(
            403,
            f"API key {caller.key_id} is confined to tenant {caller.tenant}, and may not {action}:"
            " every tenant shares it",
            field="authorization",
        )
    return None


def forbidden(caller: Principal, action: str) -> ApiError:
    return ApiError(
        403, f"API key {caller.key_id} has role {caller.role.value}, which may not {action}", field="authorization"
    )


Caller = Annotated[Principal, Depends(authenticate)]
TaskWriter = Annotated[Principal, Depends(allow(TASK_WRITERS, "act on tasks"))]
AgentRegistrar = Annotated[Principal, Depends(allow(TASK_WRITERS, "register agents"))]
Operator = Annotated[Principal, Depends(allow(OPERATORS, "act on the fleet or the model catalogue", fleet_wide=True))]
# Reading the fleet is for keys of no tenant that run it or watch it (admins, operators, viewers: the admin UI's
# Fleet page and /metrics are theirs already): node ids, their GPUs, prices, datacenters and the nodes waiting
# to join (a leaked cluster token's among them) are every tenant's infrastructure, no one tenant's to map.
FleetReader = Annotated[Principal, Depends(allow(FLEET_READERS, "see the fleet's nodes and replicas", fleet_wide=True))]
Admin = Annotated[Principal, Depends(allow(ADMINS, "manage tenants, API keys or the audit log"))]
