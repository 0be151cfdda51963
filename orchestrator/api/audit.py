"""The audit trail: every state-changing request (/v1 and the admin UI) is logged with who sent it and how it ended.

One ASGI middleware, so no route can forget it: it lets the request run, notes the status
the answer started with, and then appends a row (key, role, method, path, target, status).
Only requests whose key authenticated are logged: the refusals of a known key are (a viewer's 403,
another tenant's 404, a 409, a body too large), since attempts are what an audit is read for, but
a request with no valid key (a 401, a failed sign-in) is no one's action, and logging it would let
anyone on the network grow the log without end. Node agents' own traffic (join, heartbeats, step
books) is not a user's action and would drown the log; it is left out. So is /mcp, where every
message (a listing, a read) is a POST: its tools act through /v1 in-process, and those requests are
audited as the caller's. Only the key id is logged, never a secret.
"""

from __future__ import annotations

import logging
import re
from typing import Annotated

from fastapi import APIRouter, Query
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sdk import Unauthorized
from sdk.wire.identity import AuditEntry
from sdk.wire.limits import MAX_PAGE, MAX_STORED_INT

from ..store import Store
from .auth import PRINCIPAL_SCOPE_KEY, Admin
from .errors import ERROR_RESPONSES
from .principal import Principal
from .services import Svc

log = logging.getLogger("berth.api.audit")

WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
MCP_PATH = "/mcp"
_NODE_AGENT_PATH = re.compile(r"^/v1/nodes/(register|[^/]+/heartbeat|[^/]+/steps/[^/]+)$")
TARGET_SCOPE_KEY = "berth.audit_target"


def note_target(scope: Scope, target: str) -> None:
    """Name what a request made (a new task's id), for routes whose path does not name it."""
    scope[TARGET_SCOPE_KEY] = target


def audited(method: str, path: str) -> bool:
    """Every write by a person or an agent: /v1 and the admin UI's forms (sign-ins included), not node traffic
    nor MCP's envelope (its tools' /v1 calls are audited)."""
    return method in WRITE_METHODS and not _NODE_AGENT_PATH.match(path) and path != MCP_PATH


class AuditTrail:
    def __init__(self, app: ASGIApp, store: Store) -> None:
        self.app = app
        self.store = store

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not audited(scope["method"], scope["path"]):
            await self.app(scope, receive, send)
            return
        status = 500  # what the client sees if the app dies before answering

        async def noting_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, noting_status)
        finally:
            await self._record(scope, status)

    async def _record(self, scope: Scope, status: int) -> None:
        try:
            who = await self._caller(scope, status)
            if who is None:
                return
            await run_in_threadpool(
                self.store.audit.record,
                key_id=who.key_id,
                role=who.role.value,
                tenant=who.tenant,
                method=scope["method"],
                path=scope["path"],
                target=_target(scope),
                status=status,
            )
        except Exception:  # the request has been answered; a lost audit row must be loud, not fatal
            log.exception("could not write the audit row of %s %s", scope["method"], scope["path"])

    async def _caller(self, scope: Scope, status: int) -> Principal | None:
        """Who sent the request, if its key authenticated: as the route left it in the scope, or, for a request
        refused before any route read its key (a body too large, JSON that does not parse), its bearer key."""
        if PRINCIPAL_SCOPE_KEY in scope:
            caller = scope[PRINCIPAL_SCOPE_KEY]
            return caller if isinstance(caller, Principal) else None  # None: a sign-in that failed
        if status == 401:
            return None  # the route read the key and refused it
        key = _bearer_key(scope)
        if key is None:
            return None
        try:
            holder = await run_in_threadpool(self.store.keys.authenticate, key)
        except Unauthorized:
            return None
        return Principal(key_id=holder.key_id, role=holder.role, tenant=holder.tenant, task_id=holder.task_id)


def _bearer_key(scope: Scope) -> str | None:
    for name, value in scope.get("headers") or []:
        if name == b"authorization":
            scheme, _, key = value.decode("latin-1").partition(" ")
            if scheme.lower() == "bearer" and key.strip():
                return key.strip()
    return None


def _target(scope: Scope) -> str | None:
    noted = scope.get(TARGET_SCOPE_KEY)
    if isinstance(noted, str):
        return noted
    params = scope.get("path_params") or {}
    return ",".join(str(v) for v in params.values()) or None


router = APIRouter(prefix="/v1/audit", tags=["identity"], responses=ERROR_RESPONSES)


@router.get("", response_model=list[AuditEntry])
async def list_audit(
    svc: Svc,
    _admin: Admin,
    key_id: Annotated[str | None, Query(max_length=64, description="only this key's requests")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
    offset: Annotated[int, Query(ge=0, le=MAX_STORED_INT)] = 0,
) -> list[AuditEntry]:
    """State-changing requests, newest first (admins only)."""
    return await svc.db(svc.store.audit.list, key_id=key_id, limit=limit, offset=offset)
