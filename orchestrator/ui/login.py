"""Signing in to the admin UI with an API key, and out again.

Failed sign-ins are rate limited twice over: per client address (someone trying many keys) and
per client address and key id (someone trying many secrets of one key). Never per key id alone: then
anyone who knows a key id (it is in the audit log, in every refusal) could lock its holder out from
everywhere with ten wrong secrets. Only failures count, so a person signing in and out all day is
never slowed down. Each attempt takes its place in both limits *before* its key is checked, and a sign-in
that succeeds gives it back: a check first and a count after the (awaited) key lookup let a burst of 40
concurrent attempts all pass a limit of 30 before the first failure was counted.
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

    def attempt(self, address: str, key_id: str) -> bool:
        """Take a sign-in attempt from `address` with key `key_id` ("" for a malformed key) as a failure until it
        succeeds; False (nothing taken) when it must wait. No await between the check and the take: atomic."""
        if self._by_address.take(address) is not None:
            return False
        if key_id and self._by_key.take(f"{address}|{key_id}") is not None:
            self._by_address.give_back(address)
            return False
        return True

    def succeeded(self, address: str, key_id: str) -> None:
        """The attempt was no failure (the key was right, or none was typed): give its places back."""
        self._by_address.give_back(address)
        if key_id:
            self._by_key.give_back(f"{address}|{key_id}")


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
    if not failures.attempt(address, key_id):
        return _login_page(
            request,
            next_path,
            status=429,
            flash=Flash("error", "too many failed sign-ins: wait a minute before trying again"),
        )
    if not key:
        failures.succeeded(address, key_id)
        return _login_page(request, next_path, status=422, flash=Flash("error", "api_key: enter an API key"))
    try:
        holder = await svc.db(svc.store.keys.authenticate, key)
    except Unauthorized as exc:  # the attempt stays taken: a failure
        request.scope[PRINCIPAL_SCOPE_KEY] = None
        return _login_page(request, next_path, status=401, flash=Flash("error", f"api_key: {exc.message}"))
    failures.succeeded(address, key_id)
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
