"""The Tasks page (GET /tasks): every task the viewer may see, filtered, sorted, with sub-agents under their parent.

The list follows the tasks live: the page subscribes to the pulse (live.py), which moves on with every task event,
and fetches its list again (/panels/tasks, with the page's filters, sort and page), as the fleet pages do.

A key confined to a tenant lists that tenant's tasks only, whatever the tenant filter says.

Newest first by creation (the default) and by last update are sorted by the database, on an index, exactly. The
sorts on fields only the state's JSON holds (duration, tokens, cost, step, state) sort in Python instead, so the
store stays the same SQL on SQLite and PostgreSQL: over the SORT_WINDOW newest matching tasks, which the page
says when there were more. The time filter is on the creation time in SQL, so it narrows that window too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse

from sdk import TaskState, TaskStatus

from ..api.errors import ApiError
from ..api.services import Services, services
from ..store.tasks import TaskOrder
from .rendering import Flash, render
from .session_auth import Viewer, signed_in

router = APIRouter(include_in_schema=False)
Signed = Annotated[Viewer, Depends(signed_in)]
Svc = Annotated[Services, Depends(services)]
TASKS_PER_PAGE = 100
# How many of the newest matching tasks a sort on the state's JSON reads: enough for any page an operator pages
# through, few enough that one page view parses them in well under a second.
SORT_WINDOW = 2_000
DEFAULT_SORT, DEFAULT_DIR = "started", "desc"
DIRECTIONS = ("desc", "asc")
# A task is started when it is submitted (its started_at is its submission time), which is when its row is
# created: the Started column sorts on the creation index.
SQL_SORTS: dict[str, TaskOrder] = {"started": "created", "updated": "updated"}
_STATUS_RANK = {s: i for i, s in enumerate(TaskStatus)}  # the lifecycle's order: queued … then the final ones
SortKey = Callable[[TaskState, datetime], float | None]
WINDOW_SORTS: dict[str, SortKey] = {
    "duration": lambda t, now: duration_s(t, now),
    "tokens": lambda t, now: t.spend.tokens_used,
    "cost": lambda t, now: t.spend.usd_used,
    "step": lambda t, now: t.step,
    "status": lambda t, now: _STATUS_RANK[t.status],
}
SORTS = (*SQL_SORTS, *WINDOW_SORTS)
# "Started within" quick ranges; "" is any time.
WITHIN: dict[str, timedelta] = {
    "15m": timedelta(minutes=15),
    "1h": timedelta(hours=1),
    "24h": timedelta(hours=24),
    "7d": timedelta(days=7),
}
WITHIN_WORDS = {"": "any time", "15m": "last 15 min", "1h": "last hour", "24h": "last 24 h", "7d": "last 7 days"}
TIME_FORMAT = "YYYY-MM-DDTHH:MM, UTC"
# The deepest indentation drawn: a deeper sub-agent still says its depth in data-depth.
MAX_INDENT = 6


@dataclass(frozen=True)
class ListedTask:
    """A row of the list: the task, where it sits in the tree of the page, and its times in the page's words."""

    task: TaskState
    depth: int  # 0 unless its parent is on the page (then one more than the parent's)
    parent_shown: bool  # its parent is the row above it (or above its elder siblings)
    sub_agents: int
    started: str
    started_title: str
    duration: str

    @property
    def indent(self) -> int:
        return min(self.depth, MAX_INDENT)


@dataclass(frozen=True)
class SortHeader:
    """A sortable column's header: where a click goes, and how it says it is the current sort."""

    href: str
    aria_sort: str  # "ascending" / "descending" for the current sort, "" for the others
    arrow: str


@dataclass(frozen=True)
class Listing:
    rows: list[ListedTask]
    more: bool
    window_full: bool  # a sort in Python that saw only the SORT_WINDOW newest of the matching tasks


# --- times and durations --------------------------------------------------------------------------------------


def duration_s(task: TaskState, now: datetime) -> float | None:
    """Seconds from the start to the end of a final task, or to `now` for one still alive; None if not started."""
    if task.started_at is None:
        return None
    end = (task.updated_at if task.status.is_final else now) or now
    return max(0.0, (end - task.started_at).total_seconds())


def duration_text(seconds: float | None) -> str:
    """ "850 ms", "42 s", "3 min 5 s", "2.1 h", "3.5 d": precise while short, rounder as it grows."""
    if seconds is None:
        return "–"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{int(seconds)} s"
    if seconds < 3600:
        minutes, rest = divmod(int(seconds), 60)
        return f"{minutes} min {rest} s" if rest else f"{minutes} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def started_words(at: datetime | None, now: datetime) -> tuple[str, str]:
    """(what the Started cell shows, its title): the UTC time of day for today's tasks, the date too for older
    ones; the title is the full timestamp."""
    if at is None:
        return "–", "not started"
    at = at.astimezone(UTC)
    shown = at.strftime("%H:%M:%S") if at.date() == now.date() else at.strftime("%Y-%m-%d %H:%M")
    return shown, at.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


def parse_utc(text: str) -> datetime:
    """A datetime-local field's value (or any ISO 8601 time) as UTC; one without an offset is UTC already.

    Raises ValueError for anything else."""
    parsed = datetime.fromisoformat(text.strip())
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)


def time_bounds(
    within: str, since: str, until: str, now: datetime
) -> tuple[datetime | None, datetime | None, dict[str, str]]:
    """(created after, created before, refusals by field): the quick range and the explicit times, together."""
    refusals: dict[str, str] = {}
    after = now - WITHIN[within] if within in WITHIN else None
    if within and within not in WITHIN:
        refusals["within"] = f"within: {within!r} is not one of {', '.join(WITHIN)}"
    explicit: dict[str, datetime] = {}
    for field, text in (("since", since), ("until", until)):
        if not text.strip():
            continue
        try:
            explicit[field] = parse_utc(text)
        except ValueError:
            refusals[field] = f"{field}: {text!r} is not a date and time ({TIME_FORMAT})"
    if "since" in explicit and "until" in explicit and explicit["until"] <= explicit["since"]:
        refusals["until"] = f"until: {until!r} is not after since ({since!r})"
    if "since" in explicit:
        after = max(after, explicit["since"]) if after else explicit["since"]
    return after, explicit.get("until"), refusals


# --- sorting and the tree --------------------------------------------------------------------------------------


def sort_tasks(tasks: Sequence[TaskState], sort: str, descending: bool, now: datetime) -> list[TaskState]:
    """`tasks` (newest first) in the order of a WINDOW_SORTS key; ties stay newest first, and a task without the
    value (not started: no duration) comes last either way."""
    key = WINDOW_SORTS[sort]
    valued = [(key(t, now), t) for t in tasks]
    present = [(v, t) for v, t in valued if v is not None]
    present.sort(key=lambda pair: pair[0], reverse=descending)  # stable, also reversed: ties keep their order
    return [t for _, t in present] + [t for v, t in valued if v is None]


def tree(tasks: Sequence[TaskState], now: datetime) -> list[ListedTask]:
    """The tasks with each sub-agent whose parent is among them right under that parent (recursively, siblings
    in the order given); the others keep their order. Order given to a tree's output gives it back unchanged."""
    shown = {t.task_id for t in tasks}
    children: dict[str, list[TaskState]] = {}
    for t in tasks:
        if t.parent_task_id in shown and t.parent_task_id != t.task_id:
            children.setdefault(t.parent_task_id, []).append(t)
    rows: list[ListedTask] = []
    placed: set[str] = set()

    def place(task: TaskState, depth: int) -> None:
        if task.task_id in placed:  # a parent loop (never written by a workflow) is drawn once, not forever
            return
        placed.add(task.task_id)
        below = children.get(task.task_id, [])
        started, title = started_words(task.started_at, now)
        rows.append(
            ListedTask(
                task,
                depth,
                depth > 0,
                max(len(task.children), len(below)),
                started,
                title,
                duration_text(duration_s(task, now)),
            )
        )
        for child in below:
            place(child, depth + 1)

    for t in tasks:
        if t.parent_task_id not in shown:
            place(t, 0)
    for t in tasks:  # only a loop of parents leaves any: drawn at the top
        place(t, 0)
    return rows


# --- links -----------------------------------------------------------------------------------------------------


def tasks_href(filters: Mapping[str, str], **changes: str | int) -> str:
    """This page with `changes`: every filter and the sort carried, empty ones left out."""
    merged = {**filters, **{k: str(v) for k, v in changes.items()}}
    return "/tasks?" + urlencode({k: v for k, v in merged.items() if v})


def sort_headers(filters: Mapping[str, str]) -> dict[str, SortHeader]:
    """Each sortable column's header: a click on the current sort turns it around, on another sorts by that
    (most first, but the state in its lifecycle's order), back to page 1."""
    headers = {}
    for sort in SORTS:
        current = filters["sort"] == sort
        if current:
            direction = "asc" if filters["dir"] == "desc" else "desc"
        else:
            direction = "asc" if sort == "status" else "desc"
        aria = ("descending" if filters["dir"] == "desc" else "ascending") if current else ""
        arrow = ("▼" if filters["dir"] == "desc" else "▲") if current else ""
        headers[sort] = SortHeader(tasks_href(filters, sort=sort, dir=direction, page=""), aria, arrow)
    return headers


# --- the page --------------------------------------------------------------------------------------------------


def sort_refusals(filters: dict[str, str], statuses: Sequence[str]) -> dict[str, str]:
    """What is wrong with the state filter and the sort, by field; a wrong sort is put back to the default, so
    the page's own links and form work again."""
    refusals = {}
    if filters["status"] and filters["status"] not in statuses:
        refusals["status"] = f"status: {filters['status']!r} is not one of {', '.join(statuses)}"
    if filters["sort"] not in SORTS:
        refusals["sort"] = f"sort: {filters['sort']!r} is not one of {', '.join(SORTS)}"
        filters["sort"] = DEFAULT_SORT
    if filters["dir"] not in DIRECTIONS:
        refusals["dir"] = f"dir: {filters['dir']!r} is not one of {', '.join(DIRECTIONS)}"
        filters["dir"] = DEFAULT_DIR
    return refusals


async def listing(
    svc: Services,
    scope: str | None,
    filters: Mapping[str, str],
    after: datetime | None,
    before: datetime | None,
    page: int,
    now: datetime,
) -> Listing:
    """The page's rows: a page of the database's order, or a page of the window sorted here."""
    if scope is not None and filters["tenant"] and filters["tenant"] != scope:
        return Listing([], False, False)
    wanted = dict(
        tenant=scope or filters["tenant"] or None,
        status=filters["status"] or None,
        agent=filters["agent"] or None,
        model=filters["model"] or None,
        id_prefix=filters["q"] or None,
        created_after=after,
        created_before=before,
    )
    ascending = filters["dir"] == "asc"
    offset = (page - 1) * TASKS_PER_PAGE
    if filters["sort"] in SQL_SORTS:
        found = await svc.db(
            svc.store.tasks.list,
            **wanted,
            order_by=SQL_SORTS[filters["sort"]],
            ascending=ascending,
            limit=TASKS_PER_PAGE + 1,
            offset=offset,
        )
        return Listing(tree(found[:TASKS_PER_PAGE], now), len(found) > TASKS_PER_PAGE, False)
    window = await svc.db(svc.store.tasks.list, **wanted, limit=SORT_WINDOW + 1)
    ordered = tree(sort_tasks(window[:SORT_WINDOW], filters["sort"], not ascending, now), now)
    shown = [row.task for row in ordered[offset : offset + TASKS_PER_PAGE]]
    # The tree again over the page alone: a sub-agent whose parent ended the page before starts this one.
    return Listing(tree(shown, now), len(ordered) > offset + TASKS_PER_PAGE, len(window) > SORT_WINDOW)


TaskFilter = Annotated[str, Query(max_length=200)]


@dataclass(frozen=True)
class ListQuery:
    """What the Tasks list is asked for: its filters and sort (by the query's names), and its page."""

    filters: dict[str, str]
    page: int


def list_query(
    status: Annotated[str, Query(max_length=32)] = "",
    tenant: Annotated[str, Query(max_length=64)] = "",
    agent: Annotated[str, Query(max_length=128)] = "",
    model: TaskFilter = "",
    q: TaskFilter = "",
    within: Annotated[str, Query(max_length=16)] = "",
    since: Annotated[str, Query(max_length=64)] = "",
    until: Annotated[str, Query(max_length=64)] = "",
    sort: Annotated[str, Query(max_length=32)] = DEFAULT_SORT,
    dir: Annotated[str, Query(max_length=8)] = DEFAULT_DIR,  # noqa: A002  (the query parameter's name)
    page: Annotated[int, Query(ge=1, le=10_000)] = 1,
) -> ListQuery:
    """The list's query parameters, each bounded: the page and its live panel take the same ones."""
    filters = {"status": status, "tenant": tenant, "agent": agent, "model": model, "q": q.strip()}
    filters.update({"within": within, "since": since, "until": until, "sort": sort, "dir": dir})
    return ListQuery(filters, page)


Listed = Annotated[ListQuery, Depends(list_query)]


@router.get("/tasks", response_class=HTMLResponse)
async def tasks_page(request: Request, svc: Svc, viewer: Signed, query: Listed) -> HTMLResponse:
    status_code, flash, context = await _listing_context(request, svc, viewer, query.filters, query.page)
    return render(request, "tasks.html", viewer, status=status_code, flash=flash, **context)


@router.get("/panels/tasks", response_class=HTMLResponse)
async def tasks_panel(request: Request, svc: Svc, viewer: Signed, query: Listed) -> HTMLResponse:
    """The list alone, with the page's filters, sort and page: what live.js swaps in as tasks change (the pulse
    moves on with every task event). Refused filters are refused here too, naming them."""
    status_code, flash, context = await _listing_context(request, svc, viewer, query.filters, query.page)
    if flash is not None:
        raise ApiError(status_code, flash.text, field=next(iter(context["invalid"]), None))
    return render(request, "tasks_live.html", viewer, **context)


async def _listing_context(
    request: Request, svc: Services, viewer: Viewer, filters: dict[str, str], page: int
) -> tuple[int, Flash | None, dict[str, Any]]:
    """(status, the refusal's flash, the template's variables) of the list for these filters."""
    statuses = [s.value for s in TaskStatus]
    now = datetime.now(UTC)
    refusals = sort_refusals(filters, statuses)
    after, before, time_refusals = time_bounds(filters["within"], filters["since"], filters["until"], now)
    refusals |= time_refusals
    context: dict[str, Any] = dict(  # the template's own variables, as render takes them
        filters=filters,
        statuses=statuses,
        within_words=WITHIN_WORDS,
        headers=sort_headers(filters),
        invalid=set(refusals),
        window=SORT_WINDOW,
        time_format=TIME_FORMAT,
        query=request.url.query,
    )
    if refusals:
        context.update(rows=[], more=False, window_full=False, page=1)
        return 422, Flash("error", "; ".join(refusals.values())), context
    found = await listing(svc, viewer.principal.tenant, filters, after, before, page, now)
    context.update(
        rows=found.rows,
        more=found.more,
        window_full=found.window_full,
        page=page,
        previous_href=tasks_href(filters, page=page - 1 if page > 2 else ""),
        next_href=tasks_href(filters, page=page + 1),
    )
    return 200, None, context
