"""Who is signed in to the admin UI, and whether a form really came from one of its pages.

A browser signs in with an API key once (`/login`) and from then on carries the `berth_session`
cookie: HttpOnly (no script can read it), SameSite=Strict (no other site's page can send it),
Secure when served over HTTPS. A session acts as its key, with the key's role and tenant, so
the UI can never do more than the same key could do on /v1.

Forms are guarded by a synchronizer token: each session has a CSRF token that every page puts
in its forms and every POST must carry back. The sign-in form, which has no session yet, uses
a double-submit cookie instead: a random value in a cookie and the same value in the form.
"""

from __future__ import annotations

import hmac
import secrets
from dataclasses import dataclass
from urllib.parse import quote

from fastapi import Request
from starlette.concurrency import run_in_threadpool

from ..api.auth import PRINCIPAL_SCOPE_KEY, read_task_id_as_meant
from ..api.principal import Principal
from ..api.services import Services, services
from ..store import UiSession

SESSION_COOKIE = "berth_session"
LOGIN_CSRF_COOKIE = "berth_login_csrf"
CSRF_FIELD = "csrf_token"


class SignInRequired(Exception):
    """No live session: the page answers with a redirect to /login (and back here afterwards)."""

    def __init__(self, next_path: str) -> None:
        super().__init__(next_path)
        self.next_path = next_path


class CsrfRefused(Exception):
    """A POST whose CSRF token is missing or wrong: refused before anything is read from it."""


@dataclass(frozen=True)
class Viewer:
    """The signed-in person: their session (for its CSRF token) and the principal the API checks."""

    session: UiSession
    principal: Principal


async def signed_in(request: Request) -> Viewer:
    """The session of the request's cookie; SignInRequired without a live one.

    The principal is left in the request's scope, as the API's own authentication does, so the
    audit trail names the key behind each UI action."""
    svc: Services = services(request)
    cookie = request.cookies.get(SESSION_COOKIE)
    session = await run_in_threadpool(svc.store.ui_sessions.resolve, cookie) if cookie else None
    if session is None:
        target = request.url.path if request.method == "GET" else "/"
        raise SignInRequired(
            target + (f"?{request.url.query}" if request.url.query and request.method == "GET" else "")
        )
    principal = Principal(key_id=session.key_id, role=session.role, tenant=session.tenant)
    request.scope[PRINCIPAL_SCOPE_KEY] = principal
    await read_task_id_as_meant(request, svc, principal)  # a page takes the ids /v1 takes
    return Viewer(session, principal)


def check_csrf(viewer: Viewer, form: dict[str, str]) -> None:
    presented = form.get(CSRF_FIELD, "")
    if not presented or not hmac.compare_digest(presented.encode(), viewer.session.csrf_token.encode()):
        raise CsrfRefused()


def check_login_csrf(request: Request, form: dict[str, str]) -> None:
    cookie = request.cookies.get(LOGIN_CSRF_COOKIE, "")
    presented = form.get(CSRF_FIELD, "")
    if not cookie or not presented or not hmac.compare_digest(cookie.encode(), presented.encode()):
        raise CsrfRefused()


def new_login_csrf() -> str:
    return secrets.token_urlsafe(24)


def login_url(next_path: str) -> str:
    return "/login" + (f"?next={quote(next_path, safe='/')}" if next_path and next_path != "/" else "")


def safe_next(value: str | None) -> str:
    """Where to go after signing in: only a path on this server, never another site (open redirect)."""
    if not value or not value.startswith("/") or value.startswith("//") or "\\" in value:
        return "/"
    return value
