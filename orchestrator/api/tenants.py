"""Tenant routes (admins only): create, list, read and change tenants."""

from __future__ import annotations

from fastapi import APIRouter, status

from sdk import Conflict, NotFound
from sdk.wire.identity import Tenant, TenantSpec, TenantUpdate

from .auth import Admin
from .errors import ERROR_RESPONSES, conflict, invalid, not_found
from .services import Svc

router = APIRouter(prefix="/v1/tenants", tags=["identity"], responses=ERROR_RESPONSES)


@router.post("", status_code=status.HTTP_201_CREATED, response_model=Tenant)
async def create_tenant(spec: TenantSpec, svc: Svc, _admin: Admin) -> Tenant:
    try:
        return await svc.db(svc.store.tenants.create, spec)
    except Conflict as exc:
        raise conflict(exc.message, field=exc.field) from None


@router.get("", response_model=list[Tenant])
async def list_tenants(svc: Svc, _admin: Admin) -> list[Tenant]:
    return await svc.db(svc.store.tenants.list)


@router.get("/{name}", response_model=Tenant)
async def get_tenant(name: str, svc: Svc, _admin: Admin) -> Tenant:
    found = await svc.db(svc.store.tenants.get, name)
    if found is None:
        raise not_found(f"tenant {name!r} does not exist", field="name")
    return found


@router.patch("/{name}", response_model=Tenant)
async def update_tenant(name: str, change: TenantUpdate, svc: Svc, _admin: Admin) -> Tenant:
    """Change the fields sent; null clears the quota or a default budget limit (trust cannot be cleared)."""
    if "trust" in change.model_fields_set and change.trust is None:
        raise invalid("trust", "trust cannot be cleared; send shared, isolated or dedicated")
    try:
        return await svc.db(svc.store.tenants.update, name, change)
    except NotFound as exc:
        raise not_found(exc.message, field=exc.field) from None
