"""The admin UI's pages (GET): overview, tasks, a task, a checkpoint, fleet, models (tenants, keys and audit:
admin_pages).

Each page reads through the same store and the same tenant rules as /v1: a key confined to a
tenant sees that tenant's tasks only, and another tenant's task id is "not found" here too.
Each page is also a function that actions call to show it again with a refusal and status.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.responses import HTMLResponse, Response
from sse_starlette import EventSourceResponse

from sdk import CatalogueModel
from sdk._limits import MAX_STORED_INT

from ..api import events as events_api
from ..api.checkpoints import read_checkpoint
from ..api.services import Services, services
from ..api.tasks import current_state
from .charts import Series, line_chart
from .fleet_history import FleetHistory
from .foresight import WINDOW_WORDS, duration, foresight_view, unload_window
from .overview import models_last_hour, overview
from .rendering import Flash, render
from .session_auth import Viewer, signed_in
from .task_view import TaskDetail, task_detail

router = APIRouter(include_in_schema=False)
Signed = Annotated[Viewer, Depends(signed_in)]
Svc = Annotated[Services, Depends(services)]


@router.get("/", response_class=HTMLResponse)
async def overview_page(request: Request, svc: Svc, viewer: Signed) -> HTMLResponse:
    figures = await svc.db(overview, svc.store, viewer.principal.tenant)
    history: FleetHistory | None = getattr(request.app.state, "fleet_history", None)
    replicas = Series("replicas", "replicas", history.replicas() if history else [])
    return render(request, "overview.html", viewer, figures=figures,
                  tokens_chart=line_chart("chart-tokens", figures.tokens_per_minute),
                  replicas_chart=line_chart("chart-replicas", replicas))


@router.get("/tasks/{task_id}", response_class=HTMLResponse)
async def task_page(request: Request, task_id: str, svc: Svc, viewer: Signed) -> HTMLResponse:
    return await show_task(request, svc, viewer, task_id)


async def show_task(request: Request, svc: Services, viewer: Viewer, task_id: str, *, flash: Flash | None = None,
                    status: int = 200) -> HTMLResponse:
    detail = await _detail(svc, viewer, task_id)
    return render(request, "task.html", viewer, d=detail, flash=flash, status=status)


@router.get("/tasks/{task_id}/panel", response_class=HTMLResponse)
async def task_panel(request: Request, task_id: str, svc: Svc, viewer: Signed) -> HTMLResponse:
    """The live part of the task page, which the page's script swaps in as events arrive."""
    return render(request, "task_live.html", viewer, d=await _detail(svc, viewer, task_id))


@router.get("/tasks/{task_id}/live")
async def task_live(task_id: str, svc: Svc, viewer: Signed,
                    after: Annotated[int, Query(ge=0, le=MAX_STORED_INT)] = 0) -> EventSourceResponse:
    """The task's events as SSE, as /v1 streams them with `deltas=true`, for a signed-in browser (EventSource sends
    cookies): the page shows the answer being written."""
    await svc.task_record(task_id, viewer.principal)
    return EventSourceResponse(events_api.tail(svc, task_id, after, viewer.principal.key_id,
                                               events_api.DeltaReader(svc, task_id)),
                               ping=events_api.PING_INTERVAL_S)


@router.get("/tasks/{task_id}/checkpoints/{seq}", response_class=HTMLResponse)
async def checkpoint_page(request: Request, task_id: str, seq: Annotated[int, Path(ge=0, le=MAX_STORED_INT)], svc: Svc,
                          viewer: Signed) -> HTMLResponse:
    # The API's route does the reading, the tenant check and the refusals (404, corrupt).
    checkpoint = await read_checkpoint(task_id, seq, svc, viewer.principal)
    return render(request, "checkpoint.html", viewer, task_id=task_id, checkpoint=checkpoint)


@router.get("/fleet", response_class=HTMLResponse)
async def fleet_page(request: Request, svc: Svc, viewer: Signed) -> HTMLResponse:
    return await show_fleet(request, svc, viewer)


async def show_fleet(request: Request, svc: Services, viewer: Viewer, *, flash: Flash | None = None,
                     status: int = 200) -> HTMLResponse:
    nodes = await svc.db(svc.store.fleet.list)
    replicas = [r for n in nodes for r in n.replicas]
    served = await svc.db(svc.store.ledger.last_served, [f"{r.node_id}/{r.replica_id}" for r in replicas])
    catalogue = {m.entry.name: m for m in await svc.db(svc.store.models.list)}
    by_dc: dict[str, list[Any]] = {}
    for node in nodes:
        by_dc.setdefault(node.datacenter, []).append(node)
    now = datetime.now(timezone.utc)
    idle = {r.replica_id: _idle_timer(r, served.get(f"{r.node_id}/{r.replica_id}"), catalogue.get(r.model), now)
            for r in replicas}
    return render(request, "fleet.html", viewer, datacenters=dict(sorted(by_dc.items())), replicas=replicas,
                  idle=idle, flash=flash, status=status)


def _idle_timer(replica: Any, last_served: datetime | None, model: CatalogueModel | None, now: datetime) -> str:
    """"idle 40 s (unloads in ~4 min)" for a warm replica serving nothing; "" otherwise.

    Idle since its last finished call, or since it loaded; the pool's own clock decides the unload,
    so the page says "~". The window is the policy's fixed one, else the first replica's learned one."""
    if replica.state != "warm" or replica.active_leases > 0:
        return ""
    since = last_served or replica.updated_at or now
    idle_s = max(0.0, (now - since).total_seconds())
    text = f"idle {duration(idle_s)}"
    window = unload_window(model)
    if window is not None:
        window_s, source = window
        left = window_s - idle_s
        by = "" if source == "operator" else f", {source} window"
        text += f" (unloads in ~{duration(left)}{by})" if left > 0 else f" (due to unload{by})"
    elif model is not None:
        text += " (idle window not learned yet)"
    return text


@router.get("/models", response_class=HTMLResponse)
async def models_page(request: Request, svc: Svc, viewer: Signed) -> HTMLResponse:
    return await show_models(request, svc, viewer)


async def show_models(request: Request, svc: Services, viewer: Viewer, *, flash: Flash | None = None,
                      status: int = 200, typed: tuple[str, dict[str, str]] | None = None) -> HTMLResponse:
    """The models page; `typed` is (model, form fields) of a refused policy form, shown as typed."""
    models = await svc.db(svc.store.models.list)
    replicas = await svc.db(svc.store.fleet.replicas)
    return render(request, "models.html", viewer, models=models, replicas=replicas, typed=typed, flash=flash,
                  status=status, figures=await svc.db(models_last_hour, svc.store),
                  foresight={m.entry.name: foresight_view(m) for m in models},
                  windows={m.entry.name: unload_window(m) for m in models}, window_words=WINDOW_WORDS,
                  duration=duration)


async def _detail(svc: Services, viewer: Viewer, task_id: str) -> TaskDetail:
    record = await svc.task_record(task_id, viewer.principal)
    # The live state when the workflow answers; what the store knows when Temporal does not.
    state = await current_state(svc, record)
    return await svc.db(task_detail, svc.store, state, record.spec_json)
