"""The Tasks page's own logic, without a server: durations in words, the sorts done in Python, the tree of
sub-agents, the time filter's bounds and refusals, and links that keep every filter."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from urllib.parse import parse_qs

import pytest

from orchestrator.ui.task_list import (
    DEFAULT_DIR,
    DEFAULT_SORT,
    SORTS,
    duration_s,
    duration_text,
    parse_utc,
    sort_headers,
    sort_refusals,
    sort_tasks,
    started_words,
    tasks_href,
    time_bounds,
    tree,
)
from sdk import Spend, TaskState, TaskStatus

NOW = datetime(2030, 5, 1, 12, 0, tzinfo=UTC)


def task(
    task_id: str,
    *,
    parent: str | None = None,
    children: tuple[str, ...] = (),
    tokens: int = 0,
    status: TaskStatus = TaskStatus.running,
    started: timedelta | None = timedelta(minutes=5),
    updated: timedelta = timedelta(0),
    step: int = 0,
    usd: float = 0.0,
) -> TaskState:
    """A task started `started` before NOW (None: never) and last updated `updated` before NOW."""
    return TaskState(
        task_id=task_id,
        agent="a",
        agent_version="v",
        model="m",
        tenant="t",
        status=status,
        step=step,
        max_steps=9,
        spend=Spend(token_limit=10_000, tokens_used=tokens, usd_used=usd),
        parent_task_id=parent,
        children=list(children),
        started_at=None if started is None else NOW - started,
        updated_at=NOW - updated,
    )


@pytest.mark.parametrize(
    ("seconds", "words"),
    [
        (None, "–"),
        (0.0, "0 ms"),
        (0.85, "850 ms"),
        (42.7, "42 s"),
        (60, "1 min"),
        (185, "3 min 5 s"),
        (3599, "59 min 59 s"),
        (7560, "2.1 h"),
        (47 * 3600, "47.0 h"),
        (3.5 * 86400, "3.5 d"),
    ],
)
def test_a_duration_reads_as_an_operator_would_say_it(seconds: float | None, words: str) -> None:
    assert duration_text(seconds) == words


def test_a_running_task_lasts_until_now_a_final_one_until_its_end_and_an_unstarted_one_not_at_all() -> None:
    assert duration_s(task("r", started=timedelta(minutes=3)), NOW) == 180
    awaiting = task("w", status=TaskStatus.awaiting_budget, started=timedelta(minutes=3), updated=timedelta(minutes=2))
    assert duration_s(awaiting, NOW) == 180  # still alive: its clock runs
    done = task("d", status=TaskStatus.completed, started=timedelta(minutes=3), updated=timedelta(minutes=1))
    assert duration_s(done, NOW) == 120
    assert duration_s(task("q", started=None), NOW) is None


def test_the_started_cell_shows_the_time_today_the_date_before_and_the_full_stamp_as_its_title() -> None:
    assert started_words(NOW - timedelta(minutes=1, microseconds=500_000), NOW) == (
        "11:58:59",
        "2030-05-01 11:58:59.500 UTC",
    )
    assert started_words(NOW - timedelta(days=2), NOW)[0] == "2030-04-29 12:00"
    paris = timezone(timedelta(hours=2))
    assert started_words(datetime(2030, 5, 1, 13, 30, tzinfo=paris), NOW)[0] == "11:30:00"
    assert started_words(None, NOW) == ("–", "not started")


def test_a_python_sort_keeps_ties_newest_first_and_puts_missing_values_last() -> None:
    newest_first = [
        task("e", tokens=5),
        task("d", tokens=9),
        task("c", tokens=5, started=None),
        task("b", tokens=1),
        task("a", tokens=9),
    ]

    def order(sort: str, descending: bool) -> list[str]:
        return [t.task_id for t in sort_tasks(newest_first, sort, descending, NOW)]

    assert order("tokens", True) == ["d", "a", "e", "c", "b"]
    assert order("tokens", False) == ["b", "e", "c", "d", "a"]
    assert order("duration", True)[-1] == "c" and order("duration", False)[-1] == "c"  # never started


def test_the_state_sorts_in_the_lifecycles_order_not_the_alphabets() -> None:
    tasks = [
        task("1", status=TaskStatus.completed),
        task("2", status=TaskStatus.queued),
        task("3", status=TaskStatus.awaiting_input),
        task("4", status=TaskStatus.running),
    ]
    assert [t.status.value for t in sort_tasks(tasks, "status", False, NOW)] == [
        "queued",
        "running",
        "awaiting_input",
        "completed",
    ]


def test_sub_agents_follow_their_parent_recursively_in_the_order_given() -> None:
    page = [
        task("p~x2", parent="p"),
        task("other"),
        task("p~x1.g", parent="p~x1"),
        task("p~x1", parent="p"),
        task("p", children=("p~x1", "p~x2", "p~x3")),
        task("q~x1", parent="q"),
    ]
    rows = tree(page, NOW)
    assert [(r.task.task_id, r.depth) for r in rows] == [
        ("other", 0),
        ("p", 0),
        ("p~x2", 1),
        ("p~x1", 1),
        ("p~x1.g", 2),
        ("q~x1", 0),
    ]
    shown = {r.task.task_id: r for r in rows}
    assert shown["p"].sub_agents == 3  # all it spawned, not only those on the page
    assert shown["p~x1"].sub_agents == 1  # its own child is on the page, though its state does not list it yet
    assert shown["p~x2"].parent_shown and not shown["q~x1"].parent_shown  # q~x1 says "sub-agent of q"
    assert [r.task.task_id for r in tree([r.task for r in rows], NOW)] == [r.task.task_id for r in rows]


def test_a_loop_of_parents_is_drawn_once_each() -> None:
    rows = tree([task("a", parent="b"), task("b", parent="a"), task("c", parent="c")], NOW)
    assert sorted(r.task.task_id for r in rows) == ["a", "b", "c"]


def test_the_time_filter_combines_the_quick_range_and_the_explicit_times() -> None:
    assert time_bounds("", "", "", NOW) == (None, None, {})
    assert time_bounds("1h", "", "", NOW) == (NOW - timedelta(hours=1), None, {})
    after, before, refused = time_bounds("7d", "2030-05-01T11:30", "2030-05-01T11:45", NOW)
    assert (after, before, refused) == (
        datetime(2030, 5, 1, 11, 30, tzinfo=UTC),
        datetime(2030, 5, 1, 11, 45, tzinfo=UTC),
        {},
    )
    assert time_bounds("15m", "2030-05-01T09:00", "", NOW)[0] == NOW - timedelta(minutes=15)  # the later start
    assert parse_utc("2030-05-01T13:00:00+02:00") == datetime(2030, 5, 1, 11, 0, tzinfo=UTC)


def test_the_time_filter_refuses_what_it_cannot_read_naming_the_field() -> None:
    refused = time_bounds("2w", "yesterday", "2030-13-01T00:00", NOW)[2]
    assert set(refused) == {"within", "since", "until"}
    assert refused["since"].startswith("since: 'yesterday' is not a date and time")
    assert "15m, 1h, 24h, 7d" in refused["within"]
    backwards = time_bounds("", "2030-05-01T11:00", "2030-05-01T10:00", NOW)[2]
    assert list(backwards) == ["until"] and "not after since" in backwards["until"]


def _filters(**values: str) -> dict[str, str]:
    return {
        "status": "",
        "tenant": "",
        "agent": "",
        "model": "",
        "q": "",
        "within": "",
        "since": "",
        "until": "",
        "sort": DEFAULT_SORT,
        "dir": DEFAULT_DIR,
    } | values


def test_a_bad_sort_is_refused_by_name_and_put_back_to_the_default() -> None:
    filters = _filters(sort="price", dir="up", status="done")
    refused = sort_refusals(filters, [s.value for s in TaskStatus])
    assert refused["sort"] == f"sort: 'price' is not one of {', '.join(SORTS)}"
    assert refused["dir"] == "dir: 'up' is not one of desc, asc"
    assert refused["status"].startswith("status: 'done' is not one of queued, running")
    assert (filters["sort"], filters["dir"]) == (DEFAULT_SORT, DEFAULT_DIR)


def test_the_headers_keep_every_filter_and_turn_the_current_sort_around() -> None:
    filters = _filters(agent="research", since="2030-05-01T11:00", sort="tokens", dir="desc")
    headers = sort_headers(filters)
    tokens = parse_qs(headers["tokens"].href.removeprefix("/tasks?"))
    assert tokens == {"agent": ["research"], "since": ["2030-05-01T11:00"], "sort": ["tokens"], "dir": ["asc"]}
    assert (headers["tokens"].aria_sort, headers["tokens"].arrow) == ("descending", "▼")
    assert parse_qs(headers["cost"].href.removeprefix("/tasks?"))["dir"] == ["desc"] and headers["cost"].aria_sort == ""
    assert parse_qs(headers["status"].href.removeprefix("/tasks?"))["dir"] == ["asc"]
    assert parse_qs(tasks_href(filters, page=3).removeprefix("/tasks?"))["page"] == ["3"]
    assert "page" not in tasks_href(filters, page="")
