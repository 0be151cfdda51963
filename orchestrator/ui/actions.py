"""The admin UI's buttons and forms (POST): each checks the CSRF token, then calls the /v1 route's own code.

Calling the API's route functions, with the session's principal as the caller, means a button
can do exactly what the same key could do on /v1: the same validation, tenant checks and
refusals. Role checks that /v1 makes in its route dependencies are made here first (`_allow`).
Success redirects back with a message (POST-redirect-GET); a refusal shows the page again
with the refusal, its field and its status, and changes nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, Response

from sdk import ScalingPolicy
from sdk.wire.fleet import PreemptRequest
from sdk.wire.identity import KeyRequest, Role, TenantSpec, TenantUpdate
from sdk.wire.resources import ForkRequest

from ..api import checkpoints as checkpoints_api
from ..api import keys as keys_api
from ..api import loop_approvals as approvals_api
from ..api import models as models_api
from ..api import nodes as nodes_api
from ..api import tasks as tasks_api
from ..api import tenants as tenants_api
from ..api.auth import refusal_of
from ..api.errors import ApiError
from ..api.principal import ADMINS, OPERATORS, TASK_WRITERS
from ..api.services import Services, services
from .admin_pages import show_tenants
from .fleet_pages import show_fleet, show_models
from .forms import model_from_form, read_form
from .pages import show_task
from .rendering import Flash, redirect
from .session_auth import Viewer, check_csrf, signed_in

router = APIRouter(include_in_schema=False)
Svc = Annotated[Services, Depends(services)]
Shown = Callable[..., Awaitable[Response]]

# An empty field takes the policy's default: idle_timeout_s left empty is learned from the model's idle gaps.
POLICY_FIELDS = (
    "min_replicas",
    "max_replicas",
    "idle_timeout_s",
    "scaler",
    "target",
    "warm_buffer",
    "intent_gpu_hours_per_hour",
)
TENANT_LIMITS = ("gpu_quota", "default_budget_tokens", "default_budget_usd")


@dataclass(frozen=True)
class Done:
    """What an action did, said on the page it goes to next (`to`: the page the form was on, by default)."""

    message: str
    to: str | None = None


async def _form(request: Request) -> tuple[Viewer, dict[str, str]]:
    """The signed-in viewer and the form, once its CSRF token is checked (before anything else is read)."""
    viewer = await signed_in(request)
    form = await read_form(request)
    check_csrf(viewer, form)
    return viewer, form


def _allow(viewer: Viewer, roles: frozenset[Role], action: str, *, fleet_wide: bool = False) -> None:
    refusal = refusal_of(viewer.principal, roles, action, fleet_wide=fleet_wide)
    if refusal is not None:
        raise refusal


async def _act(call: Callable[[], Awaitable[Done]], back: str, show_again: Shown) -> Response:
    """Run the action (reading its form fields is part of it); a refusal shows the page again with it."""
    try:
        done = await call()
    except ApiError as exc:
        return await show_again(flash=Flash("error", exc.message), status=exc.status)
    return redirect(done.to or back, Flash("ok", done.message))


# --- tasks -----------------------------------------------------------------------------------


@router.post("/tasks/{task_id}/{action}")
async def task_action(request: Request, task_id: str, action: str, svc: Svc) -> Response:
    viewer, form = await _form(request)
    _allow(viewer, TASK_WRITERS, "act on tasks")
    caller = viewer.principal

    async def cancel() -> Done:
        body = model_from_form(
            tasks_api.CancelBody, {"reason": form.get("reason") or "cancelled from the admin UI"}, ("reason",)
        )
        await tasks_api.cancel(task_id, svc, caller, body)
        return Done("cancel requested: the running generation is cut and the task stops")

    async def raise_budget() -> Done:
        body = model_from_form(tasks_api.RaiseBudgetRequest, form, ("tokens", "usd"))
        await tasks_api.raise_budget(task_id, body, svc, caller)
        return Done(f"budget raised by {body.tokens:,} tokens" + (f" and ${body.usd:g}" if body.usd else ""))

    async def answer() -> Done:
        await tasks_api.answer(task_id, model_from_form(tasks_api.AnswerRequest, form, ("text",)), svc, caller)
        return Done("answer sent")

    async def approve() -> Done:
        await approvals_api.approve(task_id, approvals_api.ApproveBody(), svc, caller)
        return Done("approved: the tool calls run when the agent's loop resumes")

    async def reject() -> Done:
        body = model_from_form(approvals_api.RejectBody, form, ("reason",))
        await approvals_api.reject(task_id, body, svc, caller)
        return Done("rejected: the model is told the tool calls were not approved")

    async def fork() -> Done:
        body = model_from_form(ForkRequest, form, ("checkpoint_seq",))
        forked = await checkpoints_api.fork(task_id, body, request, Response(), svc, caller)
        return Done(f"forked from checkpoint {body.checkpoint_seq} of {task_id}", to=f"/tasks/{forked.task_id}")

    async def again(**kwargs: Any) -> Response:
        return await show_task(request, svc, viewer, task_id, **kwargs)

    actions = {
        "cancel": cancel,
        "raise-budget": raise_budget,
        "answer": answer,
        "approve": approve,
        "reject": reject,
        "fork": fork,
    }
    return await _act(actions.get(action, _unknown(action, actions)), f"/tasks/{task_id}", again)


# --- fleet -----------------------------------------------------------------------------------


@router.post("/fleet/nodes/{node_id}/{action}")
async def node_action(request: Request, node_id: str, action: str, svc: Svc) -> Response:
    viewer, form = await _form(request)
    _allow(viewer, OPERATORS, "act on the fleet", fleet_wide=True)
    caller = viewer.principal

    async def drain() -> Done:
        await nodes_api.drain(node_id, svc, caller)
        return Done(f"{node_id} is draining: no new work is placed on it")

    async def undrain() -> Done:
        await nodes_api.undrain(node_id, svc, caller)
        return Done(f"{node_id} takes work again")

    async def preempt() -> Done:
        notice = model_from_form(PreemptRequest, form, ("notice_s",))
        await nodes_api.preempt(node_id, svc, caller, notice)
        return Done(f"{node_id} preempted: it leaves within {notice.notice_s:g} s")

    async def approve() -> Done:
        await nodes_api.approve(node_id, svc, caller)
        return Done(f"{node_id} is approved: placement may use it now")

    async def revoke() -> Done:
        # Not undone by a click: the node must be admitted again. The operator types its id to confirm.
        if form.get("confirm", "").strip() != node_id:
            raise ApiError(422, f"type the node id {node_id!r} to confirm revoking it", field="confirm")
        done = await nodes_api.revoke(node_id, svc, caller)
        return Done(f"{node_id} is revoked: {len(done.tasks_moved)} task(s) told to move their steps")

    async def again(**kwargs: Any) -> Response:
        return await show_fleet(request, svc, viewer, **kwargs)

    actions = {"drain": drain, "undrain": undrain, "preempt": preempt, "approve": approve, "revoke": revoke}
    return await _act(actions.get(action, _unknown(action, actions)), "/fleet", again)


# --- models ----------------------------------------------------------------------------------


@router.post("/models/{name:path}/policy")
async def set_policy(request: Request, name: str, svc: Svc) -> Response:
    viewer, form = await _form(request)
    _allow(viewer, OPERATORS, "change scaling policies", fleet_wide=True)

    async def save() -> Done:
        await models_api.set_policy(name, model_from_form(ScalingPolicy, form, POLICY_FIELDS), svc, viewer.principal)
        return Done(f"scaling policy of {name} saved")

    async def again(**kwargs: Any) -> Response:
        return await show_models(request, svc, viewer, typed=(name, form), **kwargs)

    return await _act(save, "/models", again)


@router.post("/models/{name:path}/prewarm")
async def prewarm(request: Request, name: str, svc: Svc) -> Response:
    viewer, _ = await _form(request)
    _allow(viewer, OPERATORS, "prewarm models", fleet_wide=True)

    async def start() -> Done:
        started = await models_api.prewarm(name, svc, viewer.principal, None)
        if not started.nodes:
            return Done(f"{name}: nothing to fetch: no healthy node that could serve it is missing its weights")
        where = ", ".join(
            f"{t.node_id} (from {'a datacenter peer' if t.source == 'datacenter' else 'origin'})" for t in started.nodes
        )
        return Done(f"{name}: weights going onto the disks of {where}")

    async def again(**kwargs: Any) -> Response:
        return await show_models(request, svc, viewer, **kwargs)

    return await _act(start, "/models", again)


# --- tenants and keys ------------------------------------------------------------------------


@router.post("/tenants")
async def create_tenant(request: Request, svc: Svc) -> Response:
    viewer, form = await _form(request)
    _allow(viewer, ADMINS, "manage tenants")

    async def create() -> Done:
        spec = model_from_form(TenantSpec, form, ("name", "trust", *TENANT_LIMITS))
        await tenants_api.create_tenant(spec, svc, viewer.principal)
        return Done(f"tenant {spec.name} created")

    return await _act(create, "/tenants", _tenants_again(request, svc, viewer, ("create-tenant", form)))


@router.post("/tenants/{name}")
async def update_tenant(request: Request, name: str, svc: Svc) -> Response:
    viewer, form = await _form(request)
    _allow(viewer, ADMINS, "manage tenants")

    async def update() -> Done:
        change = model_from_form(TenantUpdate, form, ("trust", *TENANT_LIMITS))
        # Every limit is on the form: one left empty is cleared, as null clears it on /v1.
        cleared = {f: None for f in TENANT_LIMITS if f in form and not form[f].strip()}
        change = TenantUpdate.model_validate({**change.model_dump(exclude_unset=True), **cleared})
        await tenants_api.update_tenant(name, change, svc, viewer.principal)
        return Done(f"tenant {name} updated")

    return await _act(update, "/tenants", _tenants_again(request, svc, viewer, (f"tenant-update-{name}", form)))


@router.post("/keys")
async def create_key(request: Request, svc: Svc) -> Response:
    viewer, form = await _form(request)
    _allow(viewer, ADMINS, "manage API keys")
    again = _tenants_again(request, svc, viewer, ("create-key", form))
    try:
        spec = model_from_form(KeyRequest, form, ("role", "tenant", "name", "description"))
        created = await keys_api.create_key(spec, request, svc, viewer.principal)
    except ApiError as exc:
        return await again(flash=Flash("error", exc.message), status=exc.status)
    # Shown on this one answer, never again (no redirect: the key must not travel in a cookie or a URL).
    # The form starts empty again: what was typed made this key.
    return await _tenants_again(request, svc, viewer)(
        flash=Flash("ok", f"key {created.key_id} created: copy it now, it is not shown again"),
        status=201,
        new_key=created.key,
    )


@router.post("/keys/{key_id}/revoke")
async def revoke_key(request: Request, key_id: str, svc: Svc) -> Response:
    viewer, _ = await _form(request)
    _allow(viewer, ADMINS, "manage API keys")

    async def revoke() -> Done:
        await keys_api.revoke_key(key_id, svc, viewer.principal)
        return Done(f"key {key_id} revoked: every request with it is refused from now on")

    return await _act(revoke, "/tenants", _tenants_again(request, svc, viewer))


def _tenants_again(
    request: Request,
    svc: Services,
    viewer: Viewer,
    typed: tuple[str, dict[str, str]] | None = None,
) -> Shown:
    """The tenants page shown again after a refusal, with the refused form (`typed`: its id, its fields) as typed."""

    async def show(**kwargs: Any) -> Response:
        return await show_tenants(request, svc, viewer, typed=typed, **kwargs)

    return show


def _unknown(action: str, actions: dict[str, Any]) -> Callable[[], Awaitable[Done]]:
    async def refuse() -> Done:
        raise ApiError(404, f"action: {action!r} is not one of {', '.join(actions)}", field="action")

    return refuse
