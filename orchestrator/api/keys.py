"""API key routes (admins only): create a key (its secret is in this answer and nowhere else), list, revoke."""

from __future__ import annotations

from fastapi import APIRouter, Request, status

from sdk import NotFound
from sdk.wire.identity import ApiKeyView, CreatedKey, KeyRequest, tenant_problem

from .audit import note_target
from .auth import Admin
from .errors import ERROR_RESPONSES, invalid, not_found
from .services import Svc

router = APIRouter(prefix="/v1/keys", tags=["identity"], responses=ERROR_RESPONSES)


@router.post("", status_code=status.HTTP_201_CREATED, response_model=CreatedKey)
async def create_key(request: KeyRequest, http: Request, svc: Svc, _admin: Admin) -> CreatedKey:
    """A new key. Its `key` is shown in this answer only: store it now; the server keeps a hash."""
    problem = tenant_problem(request.role, request.tenant)
    if problem is not None:
        raise invalid("tenant", problem)
    if request.tenant is not None and await svc.db(svc.store.tenants.get, request.tenant) is None:
        raise invalid("tenant", f"tenant {request.tenant!r} does not exist; create it first (POST /v1/tenants)")
    created = await svc.db(svc.store.keys.create, request.role, request.tenant, request.name, request.description)
    note_target(http.scope, created.key_id)
    return created


@router.get("", response_model=list[ApiKeyView])
async def list_keys(svc: Svc, _admin: Admin) -> list[ApiKeyView]:
    """Every key with its role, tenant and use; never a secret nor its hash."""
    return await svc.db(svc.store.keys.list)


@router.post("/{key_id}/revoke", response_model=ApiKeyView)
async def revoke_key(key_id: str, svc: Svc, _admin: Admin) -> ApiKeyView:
    """Revoke a key: every later request with it is refused (401). Revoking again changes nothing."""
    try:
        return await svc.db(svc.store.keys.revoke, key_id)
    except NotFound as exc:
        raise not_found(exc.message, field=exc.field) from None
