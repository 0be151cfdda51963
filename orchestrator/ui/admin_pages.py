"""The admin-only pages (GET): tenants and API keys, and the audit log.

Only an admin key (of every tenant) sees them; any other gets the 403 page naming what it may not do.
The audit page's filters arrive as typed text; each is checked here (a time that does not parse, a
status that is no status) and a bad one is a 422 page that names the field and keeps the form as typed.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse

from sdk.wire.identity import Role, Trust

from ..api.audit import WRITE_METHODS
from ..api.auth import forbidden
from ..api.errors import ApiError, invalid
from ..api.services import Services, services
from ..store.audit import StatusFilter
from .rendering import Flash, may, render
from .session_auth import Viewer, signed_in

router = APIRouter(include_in_schema=False)
Signed = Annotated[Viewer, Depends(signed_in)]
Svc = Annotated[Services, Depends(services)]

# (which form, its fields as typed): a refused form is shown again with what was typed in it.
Typed = tuple[str, dict[str, str]]

AUDIT_PAGE_SIZE = 200
AUDIT_METHODS = tuple(m for m in ("POST", "PUT", "PATCH", "DELETE") if m in WRITE_METHODS)
# Offered in the status filter beside "done" and "refused"; any other code may still be asked for in the URL.
COMMON_STATUSES = (200, 201, 202, 204, 303, 400, 401, 403, 404, 409, 413, 422, 429, 500, 503)
# The quick ranges: resolved to a `since` when asked, so paging through them does not drift as time passes.
QUICK_RANGES = {
    "1h": ("last hour", timedelta(hours=1)),
    "24h": ("last 24 h", timedelta(hours=24)),
    "7d": ("last 7 days", timedelta(days=7)),
}
TIME_INPUT = "%Y-%m-%dT%H:%M:%S"  # what <input type=datetime-local step=1> holds


@router.get("/tenants", response_class=HTMLResponse)
async def tenants_page(request: Request, svc: Svc, viewer: Signed) -> HTMLResponse:
    return await show_tenants(request, svc, viewer)


async def show_tenants(
    request: Request,
    svc: Services,
    viewer: Viewer,
    *,
    flash: Flash | None = None,
    status: int = 200,
    new_key: str | None = None,
    typed: Typed | None = None,
) -> HTMLResponse:
    """The tenants and keys page; `typed` is a refused form (its id and fields), shown again as typed."""
    require_admin(viewer, "manage tenants and API keys")
    tenants = await svc.db(svc.store.tenants.list)
    keys = await svc.db(svc.store.keys.list)
    return render(
        request,
        "tenants.html",
        viewer,
        tenants=tenants,
        keys=keys,
        new_key=new_key,
        flash=flash,
        status=status,
        typed=typed,
        trusts=[t.value for t in Trust],
        roles=[r.value for r in Role],
        limit_text=limit_text,
    )


def limit_text(value: int | float | None) -> str:
    """A limit as a number input holds it: empty for none, no float noise ("5", not "5.0")."""
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


# --- the audit log ---------------------------------------------------------------------------


@dataclass(frozen=True)
class AuditFilters:
    """The audit page's filters as typed: shown back in its form and carried by its paging links."""

    key_id: str = ""
    method: str = ""
    path: str = ""
    status: str = ""
    since: str = ""
    until: str = ""

    def link(self, page: int) -> str:
        """The query string of `page` under the same filters."""
        return "?" + urlencode({**{k: v for k, v in asdict(self).items() if v}, "page": page})

    def range_link(self, quick: str) -> str:
        """The query string of a quick range under the same filters but time (the range replaces since/until)."""
        kept = {k: v for k, v in asdict(self).items() if v and k not in ("since", "until")}
        return "?" + urlencode({**kept, "range": quick})

    @property
    def any(self) -> bool:
        return any(asdict(self).values())


@dataclass(frozen=True)
class AuditQuery:
    """The filters as the store takes them: None narrows nothing; `until` is exclusive."""

    key_id: str | None = None
    method: str | None = None
    path_contains: str | None = None
    status: StatusFilter | None = None
    since: datetime | None = None
    until: datetime | None = None


@router.get("/audit", response_class=HTMLResponse)
async def audit_page(
    request: Request,
    svc: Svc,
    viewer: Signed,
    key_id: Annotated[str, Query(max_length=64)] = "",
    method: Annotated[str, Query(max_length=10)] = "",
    path: Annotated[str, Query(max_length=200)] = "",
    status: Annotated[str, Query(max_length=10)] = "",
    since: Annotated[str, Query(max_length=40)] = "",
    until: Annotated[str, Query(max_length=40)] = "",
    quick: Annotated[str, Query(alias="range", max_length=10)] = "",
    page: Annotated[int, Query(ge=1, le=10_000)] = 1,
) -> HTMLResponse:
    require_admin(viewer, "read the audit log")
    typed = AuditFilters(
        key_id=key_id.strip(),
        method=method.strip().upper(),
        path=path.strip(),
        status=status.strip().lower(),
        since=since.strip(),
        until=until.strip(),
    )
    shown: dict[str, Any] = dict(methods=AUDIT_METHODS, statuses=COMMON_STATUSES, ranges=QUICK_RANGES)
    try:
        filters, query, window = resolve_range(typed, quick.strip(), datetime.now(UTC))
        query = audit_query(filters) if query is None else query
    except ApiError as exc:
        return render(
            request,
            "audit.html",
            viewer,
            status=exc.status,
            flash=Flash("error", exc.message),
            entries=[],
            more=False,
            filters=typed,
            page=1,
            window="",
            **shown,
        )
    entries = await svc.db(
        svc.store.audit.list, **asdict(query), limit=AUDIT_PAGE_SIZE + 1, offset=(page - 1) * AUDIT_PAGE_SIZE
    )
    return render(
        request,
        "audit.html",
        viewer,
        entries=entries[:AUDIT_PAGE_SIZE],
        more=len(entries) > AUDIT_PAGE_SIZE,
        filters=filters,
        page=page,
        window=window,
        **shown,
    )


def resolve_range(typed: AuditFilters, quick: str, now: datetime) -> tuple[AuditFilters, AuditQuery | None, str]:
    """A quick range (`range=1h`) as the `since` it means now, and the words for it; the typed filters as they
    are without one. A range beside a typed since/until is refused: which one was meant cannot be told."""
    if not quick:
        return typed, None, ""
    if quick not in QUICK_RANGES:
        raise invalid("range", f"range: {quick!r} is not one of {', '.join(QUICK_RANGES)}")
    if typed.since or typed.until:
        raise invalid("range", "range: choose a quick range or since/until, not both")
    words, span = QUICK_RANGES[quick]
    start = (now - span).replace(microsecond=0)
    filters = replace(typed, since=start.strftime(TIME_INPUT))
    return filters, audit_query(filters), f"{words}: since {start.strftime('%Y-%m-%d %H:%M:%S')} UTC"


def audit_query(filters: AuditFilters) -> AuditQuery:
    """The typed filters checked and parsed; an ApiError 422 names the first field at fault."""
    since = parse_utc("since", filters.since)
    until = until_end(filters.until)
    if since is not None and until is not None and until <= since:
        raise invalid("until", f"until: {filters.until} is before since ({filters.since})")
    if filters.method and filters.method not in AUDIT_METHODS:
        raise invalid(
            "method", f"method: {filters.method!r} is not one of {', '.join(AUDIT_METHODS)} (only writes are audited)"
        )
    return AuditQuery(
        key_id=filters.key_id or None,
        method=filters.method or None,
        path_contains=filters.path or None,
        status=parse_status(filters.status),
        since=since,
        until=until,
    )


def parse_utc(field: str, text: str) -> datetime | None:
    """An ISO time as typed in a datetime-local input, taken as UTC (an explicit offset is honoured)."""
    if not text:
        return None
    try:
        parsed = datetime.fromisoformat(text)
        return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)
    except (ValueError, OverflowError):
        raise invalid(field, f"{field}: {text!r} is not a time: write it as YYYY-MM-DDTHH:MM (UTC)") from None


def until_end(text: str) -> datetime | None:
    """The exclusive end of an `until` as typed: all of what it names is in, so "10:05" takes in the whole minute,
    "10:05:30" that second and a bare date the day (the end of time when that overflows)."""
    until = parse_utc("until", text)
    if until is None:
        return None
    try:
        return until + _precision(text)
    except OverflowError:
        return datetime.max.replace(tzinfo=UTC)


def _precision(text: str) -> timedelta:
    clock = re.split(r"[+Z-]", text.replace(" ", "T").partition("T")[2])[0]
    if not clock:
        return timedelta(days=1)
    return timedelta(seconds=1) if clock.count(":") >= 2 else timedelta(minutes=1)


def parse_status(text: str) -> StatusFilter | None:
    """ "done" (below 400), "refused" (400 and above) or one HTTP status code."""
    if not text:
        return None
    if text == "done":
        return "done"
    if text == "refused":
        return "refused"
    if text.isdigit() and 100 <= int(text) <= 599:
        return int(text)
    raise invalid("status", f"status: {text!r} is not done, refused or an HTTP status code (100–599)")


def require_admin(viewer: Viewer, action: str) -> None:
    if not may(viewer, "admin"):
        raise forbidden(viewer.principal, action)
