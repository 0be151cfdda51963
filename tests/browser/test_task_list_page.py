"""The Tasks list in chromium against a real stack: sub-agents under their parent, a sort by a column's header,
the time filter, and the page on a desktop and on a phone."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from playwright.sync_api import expect

from sdk import Budget
from tests.browser.through_api import admin_client
from tests.browser.ui import Ui
from tests.system.conftest import Stack, wait_until

pytestmark = [pytest.mark.system, pytest.mark.browser]

PREFIX = "default:ui-tl-"
COORDINATOR = f"{PREFIX}coord"
DESKTOP, PHONE = {"width": 1400, "height": 900}, {"width": 390, "height": 844}
# Each row of the table as the page drew it: id, depth, parent, tokens used.
ROWS = """() => [...document.querySelectorAll('table#tasks tbody tr[data-task-id]')].map(r => ({
    id: r.dataset.taskId, depth: +r.dataset.depth, parent: r.dataset.parent || null,
    tokens: +r.querySelector('td.tokens').dataset.tokens}))"""


@pytest.fixture(scope="module")
def tasks(stack: Stack) -> list[str]:
    """A coordinator that has spawned its research sub-agents, and two research tasks of their own, all ended."""
    berth = admin_client(stack)
    handles = [
        berth.submit(
            "coordinator",
            "delegate to research: H100 memory bandwidth (budget 5000)\n"
            "delegate to research: A100 memory bandwidth (budget 5000)",
            budget=Budget(40_000),
            task_id=COORDINATOR,
        ),
        berth.submit("research", "L4 memory bandwidth", budget=Budget(20_000), task_id=f"{PREFIX}l4"),
        berth.submit("research", "spot preemption; kv cache size", budget=Budget(20_000), task_id=f"{PREFIX}spot"),
    ]
    for handle in handles:
        wait_until(lambda handle=handle: handle.status().status.is_final, 180, f"{handle.task_id} to end")
    children = wait_until(lambda: berth.tasks(parent=COORDINATOR), 60, f"the sub-agents of {COORDINATOR}")
    return [h.task_id for h in handles] + [c.task_id for c in children]


def shown(ui: Ui) -> list[dict]:
    return ui.page.evaluate(ROWS)


def test_a_sub_agent_sits_right_under_its_parent(ui: Ui, stack: Stack, tasks: list[str]) -> None:
    ui.login(stack.admin_key(), f"/tasks?q={PREFIX}")
    rows = shown(ui)
    assert {r["id"] for r in rows} == set(tasks)
    at = [r["id"] for r in rows].index(COORDINATOR)
    assert rows[at]["depth"] == 0
    below = rows[at + 1]
    assert (below["depth"], below["parent"]) == (1, COORDINATOR)
    children = [r for r in rows if r["parent"] == COORDINATOR]
    assert rows[at + 1 : at + 1 + len(children)] == children  # every one of them, together
    parent_row = ui.page.locator(f"table#tasks tr[data-task-id='{COORDINATOR}']")
    expect(parent_row.locator("small.sub-count")).to_have_text(
        f"{len(children)} sub-agent{'s' if len(children) != 1 else ''}"
    )
    expect(ui.page.locator(f"table#tasks tr[data-task-id='{below['id']}'] .tree-mark")).to_be_visible()


def test_sorting_by_tokens_from_the_header_orders_the_column(ui: Ui, stack: Stack, tasks: list[str]) -> None:
    ui.login(stack.admin_key(), f"/tasks?q={PREFIX}")
    with ui.page.expect_navigation():
        ui.page.click("table#tasks th[data-sort=tokens] a")
    ui.shot("tasks-by-tokens")
    expect(ui.page.locator("table#tasks th[data-sort=tokens]")).to_have_attribute("aria-sort", "descending")
    assert "q=" in ui.page.url and "sort=tokens" in ui.page.url and "dir=desc" in ui.page.url
    rows = shown(ui)
    assert {r["id"] for r in rows} == set(tasks)
    top = [r["tokens"] for r in rows if r["depth"] == 0]
    assert top == sorted(top, reverse=True) and len(top) == 3
    siblings = [r["tokens"] for r in rows if r["parent"] == COORDINATOR]
    assert siblings == sorted(siblings, reverse=True)
    at = [r["id"] for r in rows].index(COORDINATOR)
    assert rows[at + 1]["parent"] == COORDINATOR  # the sub-agents still follow their parent

    with ui.page.expect_navigation():
        ui.page.click("table#tasks th[data-sort=tokens] a")  # again: the other way round
    expect(ui.page.locator("table#tasks th[data-sort=tokens]")).to_have_attribute("aria-sort", "ascending")
    top = [r["tokens"] for r in shown(ui) if r["depth"] == 0]
    assert top == sorted(top)


def test_the_time_filter_keeps_recent_tasks_and_a_later_start_finds_none(
    ui: Ui, stack: Stack, tasks: list[str]
) -> None:
    ui.login(stack.admin_key(), f"/tasks?q={PREFIX}&sort=tokens&dir=desc")
    ui.page.select_option("form#task-filter select[name=within]", "24h")
    ui.submit("form#task-filter")
    assert {r["id"] for r in shown(ui)} == set(tasks)
    expect(ui.page.locator("table#tasks th[data-sort=tokens]")).to_have_attribute("aria-sort", "descending")

    tomorrow = (datetime.now(UTC) + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M")
    ui.page.fill("form#task-filter input[name=since]", tomorrow)
    ui.submit("form#task-filter")
    assert shown(ui) == []
    expect(ui.page.locator("table#tasks tr.empty")).to_have_text("No task matches.")
    expect(ui.page.locator("form#task-filter input[name=since]")).to_have_value(tomorrow)
    assert "within=24h" in ui.page.url and "sort=tokens" in ui.page.url


def test_the_list_reads_on_a_desktop_and_scrolls_sideways_on_a_phone(ui: Ui, stack: Stack, tasks: list[str]) -> None:
    ui.login(stack.admin_key(), "/tasks")
    ui.page.set_viewport_size(DESKTOP)
    ui.shot("tasks-desktop")
    ui.page.set_viewport_size(PHONE)
    ui.shot("tasks-mobile")
    wrapper = ui.page.locator("div.scroll:has(> table#tasks)")
    assert wrapper.evaluate("w => getComputedStyle(w).overflowX") == "auto"
    assert wrapper.evaluate("w => w.scrollWidth > w.clientWidth")  # the table scrolls inside its wrapper
    assert wrapper.evaluate("w => w.getBoundingClientRect().right") <= PHONE["width"]
    form = ui.page.locator("form#task-filter")
    assert form.evaluate("f => f.getBoundingClientRect().right") <= PHONE["width"]  # the filters wrap
    ui.page.set_viewport_size(DESKTOP)
