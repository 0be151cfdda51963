"""The admin UI's buttons and forms (POST): each checks the CSRF token, then calls the /v1 route's own code.

Calling the API's route functions, with the session's principal as the caller, means a button
can do exactly what the same key could do on /v1: the same validation, tenant checks and
refusals. Role checks that /v1 makes in its route dependencies are made here first (`_allow`).
Success redirects back with a message (POST-redirect-GET); a refusal shows the page again
with the refusal, its field and its status, and changes nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, Response

from sdk import ScalingPolicy
from sdk._fleet import PreemptRequest
from sdk._identity import KeyRequest, Role, TenantSpec, TenantUpdate
from sdk._resources import ForkRequest

from ..api import checkpoints as checkpoints_api
from ..api import keys as keys_api
from ..api import models as models_api
from ..api import nodes as nodes_api
from ..api import tasks as tasks_api
from ..api import tenants as tenants_api
from ..api.auth import forbidden
from ..api.errors import ApiError
from ..api.principal import ADMINS, OPERATORS, TASK_WRITERS
from ..api.services import Services, services
from .forms import model_from_form, read_form
from .pages import show_fleet, show_models, show_task, show_tenants
from .rendering import Flash, redirect
from .session_auth import Viewer, check_csrf, signed_in

router = APIRouter(include_in_schema=False)
Svc = Annotated[Services, Depends(services)]
Shown = Callable[..., Awaitable[Response]]

POLICY_FIELDS = ("min_replicas", "max_replicas", "idle_timeout_s", "scaler", "target", "warm_buffer")


async def _form(request: Request) -> tuple[Viewer, dict[str, str]]:
    """The signed-in viewer and the form, once its CSRF token is checked (before anything else is read)."""
    viewer = await signed_in(request)
    form = await read_form(request)
    check_csrf(viewer, form)
    return viewer, form


def _allow(viewer: Viewer, roles: frozenset[Role], action: str) -> None:
    if viewer.principal.role not in roles:
        raise forbidden(viewer.principal, action)


async def _act(call: Callable[[], Awaitable[Any]], done: str, back: str, show_again: Shown) -> Response:
    try:
        await call()
    except ApiError as exc:
        return await show_again(flash=Flash("error", exc.message), status=exc.status)
    return redirect(back, Flash("ok", done))


# --- tasks -----------------------------------------------------------------------------------


@router.post("/tasks/{task_id}/cancel")
async def cancel_task(request: Request, task_id: str, svc: Svc) -> Response:
    viewer, form = await _form(request)
    _allow(viewer, TASK_WRITERS, "act on tasks")
    body = tasks_api.CancelBody(reason=form.get("reason") or "cancelled from the admin UI")
    return await _act(lambda: tasks_api.cancel(task_id, svc, viewer.principal, body),
                      "cancel requested: the task stops after its current step", f"/tasks/{task_id}",
                      _task_again(request, svc, viewer, task_id))


@router.post("/tasks/{task_id}/raise-budget")
async def raise_budget(request: Request, task_id: str, svc: Svc) -> Response:
    viewer, form = await _form(request)
    _allow(viewer, TASK_WRITERS, "act on tasks")
    again = _task_again(request, svc, viewer, task_id)
    try:
        body = model_from_form(tasks_api.RaiseBudgetRequest, form, ("tokens", "usd"))
    except ApiError as exc:
        return await again(flash=Flash("error", exc.message), status=exc.status)
    return await _act(lambda: tasks_api.raise_budget(task_id, body, svc, viewer.principal),
                      f"budget raised by {body.tokens:,} tokens" + (f" and ${body.usd:g}" if body.usd else ""),
                      f"/tasks/{task_id}", again)


@router.post("/tasks/{task_id}/answer")
async def answer(request: Request, task_id: str, svc: Svc) -> Response:
    viewer, form = await _form(request)
    _allow(viewer, TASK_WRITERS, "act on tasks")
    again = _task_again(request, svc, viewer, task_id)
    try:
        body = model_from_form(tasks_api.AnswerRequest, form, ("text",))
    except ApiError as exc:
        return await again(flash=Flash("error", exc.message), status=exc.status)
    return await _act(lambda: tasks_api.answer(task_id, body, svc, viewer.principal), "answer sent",
                      f"/tasks/{task_id}", again)


@router.post("/tasks/{task_id}/fork")
async def fork(request: Request, task_id: str, svc: Svc) -> Response:
    viewer, form = await _form(request)
    _allow(viewer, TASK_WRITERS, "act on tasks")
    again = _task_again(request, svc, viewer, task_id)
    try:
        body = model_from_form(ForkRequest, form, ("checkpoint_seq",))
        forked = await checkpoints_api.fork(task_id, body, request, Response(), svc, viewer.principal)
    except ApiError as exc:
        return await again(flash=Flash("error", exc.message), status=exc.status)
    return redirect(f"/tasks/{forked.task_id}",
                    Flash("ok", f"forked from checkpoint {body.checkpoint_seq} of {task_id}"))


def _task_again(request: Request, svc: Services, viewer: Viewer, task_id: str) -> Shown:
    async def show(**kwargs: Any) -> Response:
        return await show_task(request, svc, viewer, task_id, **kwargs)

    return show


# --- fleet -----------------------------------------------------------------------------------


@router.post("/fleet/nodes/{node_id}/{action}")
async def node_action(request: Request, node_id: str, action: str, svc: Svc) -> Response:
    viewer, form = await _form(request)
    _allow(viewer, OPERATORS, "act on the fleet")

    async def again(**kwargs: Any) -> Response:
        return await show_fleet(request, svc, viewer, **kwargs)

    if action == "drain":
        return await _act(lambda: nodes_api.drain(node_id, svc, viewer.principal),
                          f"{node_id} is draining: no new work is placed on it", "/fleet", again)
    if action == "undrain":
        return await _act(lambda: nodes_api.undrain(node_id, svc, viewer.principal),
                          f"{node_id} takes work again", "/fleet", again)
    if action == "preempt":
        try:
            notice = model_from_form(PreemptRequest, form, ("notice_s",))
        except ApiError as exc:
            return await again(flash=Flash("error", exc.message), status=exc.status)
        return await _act(lambda: nodes_api.preempt(node_id, svc, viewer.principal, notice),
                          f"{node_id} preempted: it leaves within {notice.notice_s:g} s", "/fleet", again)
    return await again(flash=Flash("error", f"action: {action!r} is not one of drain, undrain, preempt"), status=404)


# --- models ----------------------------------------------------------------------------------


@router.post("/models/{name:path}/policy")
async def set_policy(request: Request, name: str, svc: Svc) -> Response:
    viewer, form = await _form(request)
    _allow(viewer, OPERATORS, "change scaling policies")

    async def again(**kwargs: Any) -> Response:
        return await show_models(request, svc, viewer, typed=(name, form), **kwargs)

    try:
        policy = model_from_form(ScalingPolicy, form, POLICY_FIELDS)
    except ApiError as exc:
        return await again(flash=Flash("error", exc.message), status=exc.status)
    return await _act(lambda: models_api.set_policy(name, policy, svc, viewer.principal),
                      f"scaling policy of {name} saved", "/models", again)


# --- tenants and keys ------------------------------------------------------------------------


@router.post("/tenants")
async def create_tenant(request: Request, svc: Svc) -> Response:
    viewer, form = await _form(request)
    _allow(viewer, ADMINS, "manage tenants")
    again = _tenants_again(request, svc, viewer)
    try:
        spec = model_from_form(TenantSpec, form, ("name", "trust", "gpu_quota", "default_budget_tokens",
                                                  "default_budget_usd"))
    except ApiError as exc:
        return await again(flash=Flash("error", exc.message), status=exc.status)
    return await _act(lambda: tenants_api.create_tenant(spec, svc, viewer.principal), f"tenant {spec.name} created",
                      "/tenants", again)


@router.post("/tenants/{name}")
async def update_tenant(request: Request, name: str, svc: Svc) -> Response:
    viewer, form = await _form(request)
    _allow(viewer, ADMINS, "manage tenants")
    again = _tenants_again(request, svc, viewer)
    # Every field is on the form: an emptied limit is cleared, as null clears it on /v1.
    fields = ("trust", "gpu_quota", "default_budget_tokens", "default_budget_usd")
    try:
        change = model_from_form(TenantUpdate, form, fields)
    except ApiError as exc:
        return await again(flash=Flash("error", exc.message), status=exc.status)
    cleared = {f: None for f in fields[1:] if f in form and not form[f].strip()}
    change = TenantUpdate.model_validate({**change.model_dump(exclude_unset=True), **cleared})
    return await _act(lambda: tenants_api.update_tenant(name, change, svc, viewer.principal),
                      f"tenant {name} updated", "/tenants", again)


@router.post("/keys")
async def create_key(request: Request, svc: Svc) -> Response:
    viewer, form = await _form(request)
    _allow(viewer, ADMINS, "manage API keys")
    again = _tenants_again(request, svc, viewer)
    try:
        spec = model_from_form(KeyRequest, form, ("role", "tenant", "name", "description"))
        created = await keys_api.create_key(spec, request, svc, viewer.principal)
    except ApiError as exc:
        return await again(flash=Flash("error", exc.message), status=exc.status)
    # Shown on this one answer, never again (no redirect: the key must not travel in a cookie or a URL).
    return await again(flash=Flash("ok", f"key {created.key_id} created: copy it now, it is not shown again"),
                       status=201, new_key=created.key)


@router.post("/keys/{key_id}/revoke")
async def revoke_key(request: Request, key_id: str, svc: Svc) -> Response:
    viewer, _ = await _form(request)
    _allow(viewer, ADMINS, "manage API keys")
    return await _act(lambda: keys_api.revoke_key(key_id, svc, viewer.principal), f"key {key_id} revoked",
                      "/tenants", _tenants_again(request, svc, viewer))


def _tenants_again(request: Request, svc: Services, viewer: Viewer) -> Shown:
    async def show(**kwargs: Any) -> Response:
        return await show_tenants(request, svc, viewer, **kwargs)

    return show
