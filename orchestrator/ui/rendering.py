"""Pages from Jinja templates, autoescaped: any text a user or a model wrote is shown, never run.

Flash messages carry the outcome of a form across its redirect (POST, then 303 back to the
page): an HttpOnly cookie read once by the next page and cleared by it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote, unquote

from fastapi import Request
from fastapi.responses import HTMLResponse, RedirectResponse
from jinja2 import Environment, FileSystemLoader, select_autoescape

from sdk.wire.objective_layers import describe

from ..api.auth import refusal_of
from ..api.principal import ADMINS, OPERATORS, TASK_WRITERS
from ..money import usd_text
from .session_auth import CSRF_FIELD, Viewer
from .timeline import PHASE_WORDS, timeline_svg

FLASH_COOKIE = "berth_flash"
_TEMPLATES = Path(__file__).parent / "templates"


@dataclass(frozen=True)
class Flash:
    kind: Literal["ok", "error"]
    text: str


def _tokens(value: int | float | None) -> str:
    return "–" if value is None else f"{int(value):,}"


def _seconds(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:,.1f} s"


def _when(value: datetime | str | None) -> str:
    if value is None:
        return "–"
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def _ago(value: datetime | None) -> str:
    if value is None:
        return "never"
    seconds = (datetime.now(UTC) - value).total_seconds()
    if seconds < 90:
        return f"{seconds:.0f} s ago"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min ago"
    return f"{seconds / 3600:.1f} h ago"


def _pretty_json(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, default=str, ensure_ascii=False)


def _environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(_TEMPLATES),
        autoescape=select_autoescape(default=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        tokens=_tokens,
        usd=usd_text,
        seconds=_seconds,
        when=_when,
        ago=_ago,
        pretty_json=_pretty_json,
        timeline_svg=timeline_svg,
        objectives=describe,
    )
    env.globals["phase_words"] = PHASE_WORDS
    return env


templates = _environment()


def may(viewer: Viewer | None, action: Literal["task", "fleet", "admin"]) -> bool:
    """Whether the signed-in key may press the buttons of `action` (the server checks again on POST)."""
    if viewer is None:
        return False
    allowed = {"task": TASK_WRITERS, "fleet": OPERATORS, "admin": ADMINS}[action]
    return refusal_of(viewer.principal, allowed, action, fleet_wide=action == "fleet") is None


def why_not(viewer: Viewer | None, action: Literal["task", "fleet", "admin"], words: str) -> str:
    """Why a button of `action` is disabled for this viewer, in the words of its title."""
    if viewer is None:
        return "sign in first"
    principal = viewer.principal
    if action == "fleet" and principal.tenant is not None and principal.role in OPERATORS:
        return f"your key is confined to tenant {principal.tenant}; every tenant shares this"
    return f"your role ({principal.role.value}) may not {words}"


def render(
    request: Request,
    template: str,
    viewer: Viewer | None,
    *,
    status: int = 200,
    flash: Flash | None = None,
    **context: Any,
) -> HTMLResponse:
    """The page, with the one flash it should show: the one given, else the one a redirect left."""
    carried = _read_flash(request)
    html = templates.get_template(template).render(
        request=request,
        viewer=viewer,
        flash=flash or carried,
        csrf_field=CSRF_FIELD,
        csrf_token=viewer.session.csrf_token if viewer else context.pop("login_csrf", ""),
        may=lambda action: may(viewer, action),
        why_not=lambda action, words: why_not(viewer, action, words),
        path=request.url.path,
        **context,
    )
    response = HTMLResponse(html, status_code=status, headers=_PAGE_HEADERS)
    if carried is not None:
        response.delete_cookie(FLASH_COOKIE, path="/")
    return response


def redirect(to: str, flash: Flash | None = None) -> RedirectResponse:
    response = RedirectResponse(to, status_code=303)
    if flash is not None:
        response.set_cookie(
            FLASH_COOKIE,
            quote(f"{flash.kind}:{flash.text[:500]}"),
            max_age=60,
            httponly=True,
            samesite="strict",
            path="/",
        )
    return response


def _read_flash(request: Request) -> Flash | None:
    raw = request.cookies.get(FLASH_COOKIE)
    if not raw:
        return None
    kind, _, text = unquote(raw).partition(":")
    return Flash("error" if kind == "error" else "ok", text)


# No page may be framed (clickjacking a button), scripts and styles come from this server only,
# and pages that show tasks and keys are not kept in shared caches.
_PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self';"
    " frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
