"""The Tasks page (GET /tasks): every task the viewer may see, filtered, newest first.

A key confined to a tenant lists that tenant's tasks only, whatever the tenant filter says.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse

from sdk import TaskStatus

from ..api.services import Services, services
from .rendering import Flash, render
from .session_auth import Viewer, signed_in

router = APIRouter(include_in_schema=False)
Signed = Annotated[Viewer, Depends(signed_in)]
Svc = Annotated[Services, Depends(services)]
TASKS_PER_PAGE = 100


@router.get("/tasks", response_class=HTMLResponse)
async def tasks_page(
    request: Request, svc: Svc, viewer: Signed,
    status: Annotated[str, Query(max_length=32)] = "",
    tenant: Annotated[str, Query(max_length=64)] = "",
    agent: Annotated[str, Query(max_length=128)] = "",
    model: Annotated[str, Query(max_length=200)] = "",
    q: Annotated[str, Query(max_length=200)] = "",
    page: Annotated[int, Query(ge=1, le=10_000)] = 1,
) -> HTMLResponse:
    filters = {"status": status, "tenant": tenant, "agent": agent, "model": model, "q": q.strip()}
    statuses = [s.value for s in TaskStatus]
    if status and status not in statuses:
        return render(request, "tasks.html", viewer, status=422, tasks=[], filters=filters, statuses=statuses, page=1,
                      flash=Flash("error", f"status: {status!r} is not one of {', '.join(statuses)}"))
    scope = viewer.principal.tenant
    if scope is not None and tenant and tenant != scope:
        tasks = []
    else:
        tasks = await svc.db(svc.store.tasks.list, tenant=scope or tenant or None, status=status or None,
                             agent=agent or None, model=model or None, id_prefix=filters["q"] or None,
                             limit=TASKS_PER_PAGE + 1, offset=(page - 1) * TASKS_PER_PAGE)
    return render(request, "tasks.html", viewer, tasks=tasks[:TASKS_PER_PAGE], more=len(tasks) > TASKS_PER_PAGE,
                  filters=filters, statuses=statuses, page=page)
