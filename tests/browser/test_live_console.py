"""The console tells the truth while things happen (issue 35, part 4), in chromium against a real stack: a live
task's page fits a phone while it waits and while it runs, and its timeline draws the wait and the step being
generated as what they are; the Tasks list follows the tasks without a reload; /docs renders the API's operations
with nothing from outside Berth."""

from __future__ import annotations

import re
from urllib.parse import urlparse

import pytest
from playwright.sync_api import Request, Route, expect

from sdk import Budget
from tests.browser.through_api import admin_client, park_for_budget
from tests.browser.ui import Ui
from tests.system.conftest import Stack

pytestmark = [pytest.mark.system, pytest.mark.browser]

PHONE = {"width": 390, "height": 844}
WIDTH = "document.documentElement.scrollWidth"


def test_a_live_task_page_fits_a_phone_and_its_timeline_draws_the_wait_and_the_step_being_generated(
    ui: Ui, stack: Stack
) -> None:
    task = park_for_budget(stack, "default:ui-phone-live", "berths\nlength: 3000 tokens", agent="writer")
    ui.page.set_viewport_size(PHONE)
    ui.login(stack.admin_key(), f"/tasks/{task.task_id}")
    page = ui.page
    expect(page.locator("#live")).to_have_attribute("data-live", "on")
    expect(page.locator("#task-status")).to_have_text("awaiting_budget")
    ui.shot("phone-waiting-for-budget")
    assert page.evaluate(WIDTH) <= PHONE["width"], f"a waiting task's page is {page.evaluate(WIDTH)} px wide"
    timeline = page.locator("svg#timeline")
    expect(timeline.locator("rect.phase-budget")).to_have_count(1)
    expect(page.locator(".timeline-legend li[data-phase='budget']")).to_have_text("waiting for budget")

    task.raise_budget(60_000)
    expect(page.locator("#task-status")).to_have_text("running", timeout=60_000)
    expect(timeline.locator("rect.phase-generating")).to_have_count(1, timeout=60_000)
    tip = timeline.locator("rect.phase-generating").get_attribute("data-tip") or ""
    # Whichever step is generating when the page is read (the first few are quick on an idle machine).
    assert re.fullmatch(r"step \d+ · generating now: for .+ so far", tip), tip
    ui.shot("phone-running")
    assert page.evaluate(WIDTH) <= PHONE["width"], f"a running task's page is {page.evaluate(WIDTH)} px wide"
    task.cancel()


def test_the_tasks_list_follows_the_tasks_without_a_reload(ui: Ui, stack: Stack) -> None:
    ui.login(stack.admin_key(), "/tasks?q=default:ui-list-live")
    page = ui.page
    marker = page.locator("#page-live")
    expect(marker).to_have_attribute("data-live", "on", timeout=30_000)
    page.evaluate("window.__same_page = true")
    expect(page.locator("table#tasks tr.empty")).to_have_count(1)

    handle = admin_client(stack).submit(
        "research", "L4 memory bandwidth", budget=Budget(20_000), task_id="default:ui-list-live-1"
    )
    row = page.locator("table#tasks tr[data-task-id='default:ui-list-live-1']")
    expect(row).to_have_count(1, timeout=60_000)  # it arrives
    handle.result(timeout=120)
    expect(row.locator("td.status")).to_have_text("completed", timeout=60_000)  # and changes
    assert page.evaluate("window.__same_page") is True
    ui.page.set_viewport_size(PHONE)
    assert page.evaluate(WIDTH) <= PHONE["width"]
    ui.shot("tasks-list-live")


def test_the_api_docs_render_their_operations_with_no_network(ui: Ui, stack: Stack) -> None:
    api = urlparse(stack.api)
    outside: list[str] = []

    def only_berth(route: Route, request: Request) -> None:
        if urlparse(request.url).netloc == api.netloc:
            route.continue_()
        else:
            outside.append(request.url)
            route.abort("internetdisconnected")

    ui.page.route("**/*", only_berth)
    ui.open("/docs")
    operations = ui.page.locator("#swagger-ui .opblock")
    expect(operations.first).to_be_visible(timeout=30_000)
    assert operations.count() > 20
    expect(ui.page.locator("#swagger-ui .opblock-summary-path[data-path='/v1/tasks']").first).to_be_visible()
    ui.shot("docs-offline")
    assert outside == []
    redoc = ui.page.goto(stack.api + "/redoc")
    assert redoc is not None and urlparse(ui.page.url).path == "/docs"
