"""Signing in to the admin UI with an API key, and out again.

Failed sign-ins are rate limited twice over: per client address (someone trying many keys) and
per client address and key id (someone trying many secrets of one key). Never per key id alone: then
anyone who knows a key id (it is in the audit log, in every refusal) could lock its holder out from
everywhere with ten wrong secrets. Only failures count, so a person signing in and out all day is
never slowed down.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse, Response

from sdk import Unauthorized

from ..api.auth import PRINCIPAL_SCOPE_KEY
from ..api.limits import KeyRateLimit
from ..api.principal import Principal
from ..api.services import Services, services
from ..store.keys import split_key
from ..store.sessions import SESSION_LIFETIME
from .forms import read_form
from .rendering import Flash, redirect, render
from .session_auth import (
    LOGIN_CSRF_COOKIE,
    SESSION_COOKIE,
    check_csrf,
    check_login_csrf,
    new_login_csrf,
    safe_next,
    signed_in,
)

# Ten wrong secrets of one key from one address at once, then one more a minute: plenty for typos, hopeless
# for guessing a 256-bit secret. An address may fail more often over all its keys (30), as an office behind
# one NAT address may mistype several people's keys before anyone is guessing.
FAILED_LOGIN_BURST = 10
ADDRESS_FAILED_LOGIN_BURST = 30
FAILED_LOGINS_PER_S = 1 / 60

router = APIRouter(include_in_schema=False)
Svc = Annotated[Services, Depends(services)]


class FailedSignIns:
    """The app's two limiters of failed sign-ins (made once, by ui.install): by address, by address and key id."""

    def __init__(self) -> None:
        self._by_address = KeyRateLimit(FAILED_LOGINS_PER_S, ADDRESS_FAILED_LOGIN_BURST)
        self._by_key = KeyRateLimit(FAILED_LOGINS_PER_S, FAILED_LOGIN_BURST)

    def locked(self, address: str, key_id: str) -> bool:
        """Whether a sign-in from `address` with key `key_id` ("" for a malformed key) must wait."""
        if self._by_address.exhausted(address):
            return True
        return bool(key_id) and self._by_key.exhausted(f"{address}|{key_id}")

    def failed(self, address: str, key_id: str) -> None:
        self._by_address.take(address)
        if key_id:
            self._by_key.take(f"{address}|{key_id}")


@router.get("/login", response_class=HTMLResponse)
async def login_form(
    request: Request, next_: Annotated[str, Query(alias="next", max_length=2000)] = "/"
) -> HTMLResponse:
    return _login_page(request, safe_next(next_))


@router.post("/login", response_class=HTMLResponse)
async def login(request: Request, svc: Svc) -> Response:
    form = await read_form(request)
    next_path = safe_next(form.get("next"))
    check_login_csrf(request, form)
    key = form.get("api_key", "").strip()
    failures: FailedSignIns = request.app.state.failed_logins
    address = request.client.host if request.client else "unknown"
    key_id = (split_key(key) or ("", ""))[0]
    if failures.locked(address, key_id):
        return _login_page(
            request,
            next_path,
            status=429,
            flash=Flash("error", "too many failed sign-ins: wait a minute before trying again"),
        )
    if not key:
        return _login_page(request, next_path, status=422, flash=Flash("error", "api_key: enter an API key"))
    try:
        holder = await svc.db(svc.store.keys.authenticate, key)
    except Unauthorized as exc:
        failures.failed(address, key_id)
        request.scope[PRINCIPAL_SCOPE_KEY] = None
        return _login_page(request, next_path, status=401, flash=Flash("error", f"api_key: {exc.message}"))
    if holder.task_id is not None:
        return _login_page(
            request,
            next_path,
            status=403,
            flash=Flash(
                "error",
                f"api_key: key {holder.key_id} is the token of task {holder.task_id}, for that task's own tools;"
                " sign in with an API key",
            ),
        )
    request.scope[PRINCIPAL_SCOPE_KEY] = Principal(holder.key_id, holder.role, holder.tenant)
    started = await svc.db(svc.store.ui_sessions.start, holder.key_id, holder.role, holder.tenant)
    response = redirect(next_path)
    response.set_cookie(
        SESSION_COOKIE,
        started.cookie,
        httponly=True,
        samesite="strict",
        path="/",
        secure=request.url.scheme == "https",
        max_age=int(SESSION_LIFETIME.total_seconds()),
    )
    response.delete_cookie(LOGIN_CSRF_COOKIE, path="/login")
    return response


@router.post("/logout")
async def logout(request: Request, svc: Svc) -> Response:
    viewer = await signed_in(request)
    check_csrf(viewer, await read_form(request))
    await svc.db(svc.store.ui_sessions.end, request.cookies.get(SESSION_COOKIE, ""))
    response = redirect("/login", Flash("ok", "signed out"))
    response.delete_cookie(SESSION_COOKIE, path="/")
    return response


def _login_page(request: Request, next_path: str, *, status: int = 200, flash: Flash | None = None) -> HTMLResponse:
    token = request.cookies.get(LOGIN_CSRF_COOKIE) or new_login_csrf()
    response = render(request, "login.html", None, status=status, flash=flash, next_path=next_path, login_csrf=token)
    response.set_cookie(
        LOGIN_CSRF_COOKIE, token, httponly=True, samesite="strict", path="/login", secure=request.url.scheme == "https"
    )
    return response
