"""The admin UI's task pages (GET): a task (with its live panel and event stream) and a checkpoint.

Each page reads through the same store and the same tenant rules as /v1: a key confined to a
tenant sees that tenant's tasks only, and another tenant's task id is "not found" here too.
Each page is also a function that actions call to show it again with a refusal and status.
"""

from __future__ import annotations

from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.responses import HTMLResponse
from sse_starlette import EventSourceResponse

from sdk.wire.limits import MAX_STORED_INT

from ..api import events as events_api
from ..api.checkpoints import read_checkpoint
from ..api.services import Services, services
from ..api.tasks import current_state
from ..config import BerthConfig
from .rendering import Flash, render
from .session_auth import Viewer, signed_in
from .task_view import TaskDetail, task_detail

router = APIRouter(include_in_schema=False)
Signed = Annotated[Viewer, Depends(signed_in)]
Svc = Annotated[Services, Depends(services)]


@router.get("/tasks/{task_id}", response_class=HTMLResponse)
async def task_page(request: Request, task_id: str, svc: Svc, viewer: Signed) -> HTMLResponse:
    return await show_task(request, svc, viewer, task_id)


async def show_task(
    request: Request, svc: Services, viewer: Viewer, task_id: str, *, flash: Flash | None = None, status: int = 200
) -> HTMLResponse:
    detail = await _detail(svc, viewer, task_id)
    return render(
        request,
        "task.html",
        viewer,
        d=detail,
        flash=flash,
        status=status,
        temporal_url=workflow_url(svc.config, detail.state.task_id),
    )


@router.get("/tasks/{task_id}/panel", response_class=HTMLResponse)
async def task_panel(request: Request, task_id: str, svc: Svc, viewer: Signed) -> HTMLResponse:
    """The live part of the task page, which the page's script swaps in as events arrive."""
    return render(request, "task_live.html", viewer, d=await _detail(svc, viewer, task_id))


@router.get("/tasks/{task_id}/live")
async def task_live(
    task_id: str, svc: Svc, viewer: Signed, after: Annotated[int, Query(ge=0, le=MAX_STORED_INT)] = 0
) -> EventSourceResponse:
    """The task's events as SSE, as /v1 streams them with `deltas=true`, for a signed-in browser (EventSource sends
    cookies): the page shows the answer being written."""
    await svc.task_record(task_id, viewer.principal)
    return EventSourceResponse(
        events_api.tail(svc, task_id, after, viewer.principal.key_id, deltas=True),
        ping=events_api.PING_INTERVAL_S,
    )


@router.get("/tasks/{task_id}/checkpoints/{seq}", response_class=HTMLResponse)
async def checkpoint_page(
    request: Request, task_id: str, seq: Annotated[int, Path(ge=0, le=MAX_STORED_INT)], svc: Svc, viewer: Signed
) -> HTMLResponse:
    # The API's route does the reading, the tenant check and the refusals (404, corrupt).
    checkpoint = await read_checkpoint(task_id, seq, svc, viewer.principal)
    return render(request, "checkpoint.html", viewer, task_id=task_id, checkpoint=checkpoint)


def workflow_url(config: BerthConfig, task_id: str) -> str | None:
    """The task's workflow (its workflow id is the task id) in the Temporal UI, when Berth knows that UI."""
    ui = config.resolved_temporal_ui_url
    if ui is None:
        return None
    return f"{ui}/namespaces/{quote(config.temporal_namespace, safe='')}/workflows/{quote(task_id, safe='')}"


async def _detail(svc: Services, viewer: Viewer, task_id: str) -> TaskDetail:
    record = await svc.task_record(task_id, viewer.principal)
    # The live state when the workflow answers; what the store knows when Temporal does not.
    state = await current_state(svc, record)
    return await svc.db(task_detail, svc.store, state, record.spec_json)
