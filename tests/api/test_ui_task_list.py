"""The Tasks page over HTTP, in-process: its sorts, the refusal of a sort or a time it cannot use, the time
filter, the tree of sub-agents, and paging links that keep every filter, on rows written as workflows leave them."""

from __future__ import annotations

import html
import re
from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qs, urlparse

import httpx
import pytest
from api_helpers import unique
from sqlalchemy import update
from ui_helpers import SignIn

from orchestrator.store import Store
from orchestrator.store.tables import TaskRow
from orchestrator.ui import task_list
from sdk import Spend, TaskState, TaskStatus
from sdk.wire.identity import Role, TenantSpec

ROW = re.compile(r'<tr data-task-id="([^"]+)" data-depth="(\d+)"')


def put(
    store: Store,
    task_id: str,
    *,
    tokens: int = 0,
    ago: timedelta = timedelta(minutes=1),
    status: TaskStatus = TaskStatus.running,
    parent: str | None = None,
    children: tuple[str, ...] = (),
    tenant: str = "default",
) -> TaskState:
    """A task submitted `ago` before now (its row made then too), with `tokens` spent, as its workflow leaves it."""
    at = datetime.now(UTC) - ago
    state = TaskState(
        task_id=task_id,
        agent="research",
        agent_version="v1",
        model="llama-3.1-8b",
        tenant=tenant,
        status=status,
        max_steps=10,
        spend=Spend(token_limit=50_000, tokens_used=tokens),
        parent_task_id=parent,
        children=list(children),
        started_at=at,
        updated_at=at,
    )
    store.tasks.create(task_id, "{}", state)
    with store.engine.begin() as connection:
        connection.execute(update(TaskRow).where(TaskRow.task_id == task_id).values(created_at=at))
    return state


def rows(page: httpx.Response) -> list[tuple[str, int]]:
    """(task id, depth) of each row, in the page's order."""
    return [(html.unescape(task_id), int(depth)) for task_id, depth in ROW.findall(page.text)]


def flash(page: httpx.Response) -> str:
    found = re.search(r'<div id="flash" data-kind="error"[^>]*>([^<]*)</div>', page.text)
    assert found, page.text[:1500]
    return html.unescape(found.group(1))


async def test_sorting_by_tokens_either_way_marks_the_column_and_keeps_the_filters(
    sign_in: SignIn, store: Store
) -> None:
    p = unique("tok")
    for name, tokens in (("a", 300), ("b", 5_000), ("c", 40), ("d", 1_200)):
        put(store, f"{p}-{name}", tokens=tokens)
    viewer = await sign_in(Role.viewer)
    most = await viewer.get(f"/tasks?q={p}&agent=research&sort=tokens&dir=desc")
    assert most.status_code == 200
    assert [task_id for task_id, _ in rows(most)] == [f"{p}-b", f"{p}-d", f"{p}-a", f"{p}-c"]
    header = re.search(
        r'<th class="num" data-sort="tokens" aria-sort="descending"><a class="sort current" '
        r'href="([^"]+)"',
        most.text,
    )
    assert header, "the tokens header says it is the current sort"
    turned = parse_qs(urlparse(html.unescape(header.group(1))).query)
    assert turned == {"q": [p], "agent": ["research"], "sort": ["tokens"], "dir": ["asc"]}
    assert most.text.count("aria-sort=") == 1
    assert re.search(r'name="sort" value="tokens"', most.text)  # the filter form keeps the sort too

    least = await viewer.get(f"/tasks?q={p}&sort=tokens&dir=asc")
    assert [task_id for task_id, _ in rows(least)] == [f"{p}-c", f"{p}-a", f"{p}-d", f"{p}-b"]
    assert "sort-window" not in least.text  # four tasks: all of them sorted


async def test_the_sql_sorts_are_the_default_newest_first_and_turn_around(sign_in: SignIn, store: Store) -> None:
    p = unique("new")
    for i in range(3):
        put(store, f"{p}-{i}", ago=timedelta(minutes=10 - i))
    viewer = await sign_in(Role.viewer)
    newest = [f"{p}-2", f"{p}-1", f"{p}-0"]
    default = await viewer.get(f"/tasks?q={p}")
    assert [task_id for task_id, _ in rows(default)] == newest
    assert re.search(r'data-sort="started" aria-sort="descending"', default.text)
    oldest = await viewer.get(f"/tasks?q={p}&sort=started&dir=asc")
    assert [task_id for task_id, _ in rows(oldest)] == newest[::-1]
    store.tasks.save_state(put(store, f"{p}-0", ago=timedelta(minutes=10)).model_copy(
        update={"updated_at": datetime.now(UTC), "step": 2}))  # fmt: skip
    touched = await viewer.get(f"/tasks?q={p}&sort=updated&dir=desc")
    assert [task_id for task_id, _ in rows(touched)][0] == f"{p}-0"


@pytest.mark.parametrize(
    ("query", "words"),
    [
        ("sort=price", "sort: 'price' is not one of started, updated, duration, tokens, cost, step, status"),
        ("dir=sideways", "dir: 'sideways' is not one of desc, asc"),
        ("within=2w", "within: '2w' is not one of 15m, 1h, 24h, 7d"),
    ],
)
async def test_a_sort_or_range_it_cannot_use_is_refused_by_name(
    sign_in: SignIn, store: Store, query: str, words: str
) -> None:
    put(store, unique("any"))
    refused = await (await sign_in(Role.viewer)).get(f"/tasks?agent=research&{query}")
    assert refused.status_code == 422
    assert flash(refused) == words
    assert rows(refused) == []
    assert 'name="agent" value="research"' in refused.text  # what was asked stays on the form
    if "sort" in query or "dir" in query:  # the form and the headers are back on the default sort: they work
        assert 'name="sort" value="started"' in refused.text and 'name="dir" value="desc"' in refused.text


async def test_the_time_filter_keeps_the_tasks_started_in_the_window(sign_in: SignIn, store: Store) -> None:
    p = unique("when")
    put(store, f"{p}-now", ago=timedelta(minutes=2))
    put(store, f"{p}-hours", ago=timedelta(hours=3))
    put(store, f"{p}-days", ago=timedelta(days=3))
    viewer = await sign_in(Role.viewer)

    async def ids(query: str) -> list[str]:
        page = await viewer.get(f"/tasks?q={p}&{query}")
        assert page.status_code == 200, flash(page)
        return [task_id.removeprefix(f"{p}-") for task_id, _ in rows(page)]

    assert await ids("within=15m") == ["now"]
    assert await ids("within=24h") == ["now", "hours"]
    assert await ids("within=") == ["now", "hours", "days"]
    utc = datetime.now(UTC)
    since, until = (
        (utc - timedelta(days=1)).strftime("%Y-%m-%dT%H:%M"),
        (utc - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M"),
    )
    assert await ids(f"since={since}&until={until}") == ["hours"]
    assert await ids(f"until={until}&sort=tokens") == ["hours", "days"]  # the window sorts narrow the same way
    page = await viewer.get(f"/tasks?q={p}&since={since}")
    assert f'value="{since}" type="datetime-local"' in page.text


async def test_a_time_it_cannot_read_is_refused_and_stays_on_the_form_as_typed(sign_in: SignIn) -> None:
    viewer = await sign_in(Role.viewer)
    refused = await viewer.get("/tasks?since=last+tuesday&until=2030-05-01T10:00")
    assert refused.status_code == 422
    assert flash(refused) == "since: 'last tuesday' is not a date and time (YYYY-MM-DDTHH:MM, UTC)"
    # Plain text, so the browser keeps what was typed (a datetime-local field would blank it).
    assert re.search(r'<input name="since" value="last tuesday" type="text" aria-invalid="true"', refused.text)
    assert 'name="until" value="2030-05-01T10:00" type="datetime-local"' in refused.text
    backwards = await viewer.get("/tasks?since=2030-05-01T10:00&until=2030-05-01T09:00")
    assert backwards.status_code == 422 and flash(backwards).startswith("until: '2030-05-01T09:00' is not after")


async def test_sub_agents_sit_under_their_parent_and_a_lone_one_names_it(sign_in: SignIn, store: Store) -> None:
    p = unique("tree")
    put(store, f"{p}-lead", ago=timedelta(minutes=9), tokens=10, children=(f"{p}-lead~x1.a", f"{p}-lead~x1.b"))
    put(store, f"{p}-solo", ago=timedelta(minutes=8), tokens=500)
    put(store, f"{p}-lead~x1.a", ago=timedelta(minutes=7), parent=f"{p}-lead", tokens=900)
    put(store, f"{p}-lead~x1.b", ago=timedelta(minutes=6), parent=f"{p}-lead", tokens=20)
    viewer = await sign_in(Role.viewer)
    page = await viewer.get(f"/tasks?q={p}")
    assert rows(page) == [(f"{p}-solo", 0), (f"{p}-lead", 0), (f"{p}-lead~x1.b", 1), (f"{p}-lead~x1.a", 1)]
    assert f'data-depth="1" data-parent="{p}-lead" class="sub-agent"' in page.text
    assert "2 sub-agents" in page.text
    # Sorted: the top-level rows move, each sub-agent stays under its parent, siblings in the sort's order.
    by_tokens = await viewer.get(f"/tasks?q={p}&sort=tokens&dir=desc")
    assert rows(by_tokens) == [(f"{p}-solo", 0), (f"{p}-lead", 0), (f"{p}-lead~x1.a", 1), (f"{p}-lead~x1.b", 1)]
    # A sub-agent without its parent on the page says whose it is.
    alone = await viewer.get(f"/tasks?q={p}-lead~")
    assert rows(alone) == [(f"{p}-lead~x1.b", 0), (f"{p}-lead~x1.a", 0)]
    assert f'sub-agent of <a href="/tasks/{p}-lead">' in alone.text


async def test_paging_keeps_the_filters_and_the_sort_and_a_full_window_says_so(
    sign_in: SignIn, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(task_list, "TASKS_PER_PAGE", 2)
    monkeypatch.setattr(task_list, "SORT_WINDOW", 4)
    p = unique("page")
    for i in range(5):
        put(store, f"{p}-{i}", tokens=100 * i, ago=timedelta(minutes=10 - i))
    viewer = await sign_in(Role.viewer)
    first = await viewer.get(f"/tasks?q={p}&within=24h&sort=tokens&dir=asc")
    # Only the 4 newest (1…4) are sorted; the page says so.
    assert [task_id for task_id, _ in rows(first)] == [f"{p}-1", f"{p}-2"]
    assert "Sorted among the 4 newest matching tasks" in first.text
    following = re.search(r'<a rel="next" href="([^"]+)"', first.text)
    assert following, "a next link"
    carried = parse_qs(urlparse(html.unescape(following.group(1))).query)
    assert carried == {"q": [p], "within": ["24h"], "sort": ["tokens"], "dir": ["asc"], "page": ["2"]}
    second = await viewer.get(html.unescape(following.group(1)))
    assert [task_id for task_id, _ in rows(second)] == [f"{p}-3", f"{p}-4"]
    assert 'rel="next"' not in second.text and 'rel="prev"' in second.text

    sql_first = await viewer.get(f"/tasks?q={p}")  # a database sort pages them all, with no such note
    assert "Sorted among" not in sql_first.text and 'rel="next"' in sql_first.text


async def test_a_confined_key_sorts_its_own_tenants_tasks_only(sign_in: SignIn, store: Store) -> None:
    tenant = store.tenants.create(TenantSpec(name=unique("acme"))).name
    p = unique("scope")
    put(store, f"{p}-mine", tenant=tenant, tokens=1)
    put(store, f"{p}-theirs", tokens=99_000)
    confined = await sign_in(Role.operator, tenant=tenant)
    for query in ("sort=tokens&dir=desc", "sort=updated", "sort=duration&tenant=default", ""):
        page = await confined.get(f"/tasks?q={p}&{query}")
        assert f"{p}-theirs" not in page.text, query
    assert [task_id for task_id, _ in rows(await confined.get(f"/tasks?q={p}&sort=tokens"))] == [f"{p}-mine"]
