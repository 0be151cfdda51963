"""The admin-only pages (GET): tenants and API keys, and the audit log.

Only an admin key (of every tenant) sees them; any other gets the 403 page naming what it may not do.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse

from ..api.auth import forbidden
from ..api.services import Services, services
from .rendering import Flash, may, render
from .session_auth import Viewer, signed_in

router = APIRouter(include_in_schema=False)
Signed = Annotated[Viewer, Depends(signed_in)]
Svc = Annotated[Services, Depends(services)]


@router.get("/tenants", response_class=HTMLResponse)
async def tenants_page(request: Request, svc: Svc, viewer: Signed) -> HTMLResponse:
    return await show_tenants(request, svc, viewer)


async def show_tenants(request: Request, svc: Services, viewer: Viewer, *, flash: Flash | None = None,
                       status: int = 200, new_key: str | None = None) -> HTMLResponse:
    require_admin(viewer, "manage tenants and API keys")
    tenants = await svc.db(svc.store.tenants.list)
    keys = await svc.db(svc.store.keys.list)
    return render(request, "tenants.html", viewer, tenants=tenants, keys=keys, new_key=new_key, flash=flash,
                  status=status)


@router.get("/audit", response_class=HTMLResponse)
async def audit_page(request: Request, svc: Svc, viewer: Signed,
                     key_id: Annotated[str, Query(max_length=64)] = "",
                     page: Annotated[int, Query(ge=1, le=10_000)] = 1) -> HTMLResponse:
    require_admin(viewer, "read the audit log")
    entries = await svc.db(svc.store.audit.list, key_id=key_id or None, limit=201, offset=(page - 1) * 200)
    return render(request, "audit.html", viewer, entries=entries[:200], more=len(entries) > 200, key_id=key_id,
                  page=page)


def require_admin(viewer: Viewer, action: str) -> None:
    if not may(viewer, "admin"):
        raise forbidden(viewer.principal, action)
