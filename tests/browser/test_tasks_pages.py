"""Signing in and the task pages, against tasks the sample agents really run on the stack."""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlparse

import pytest
from playwright.sync_api import expect

from sdk import Budget, TaskStatus
from tests.browser.through_api import PARKED_TOKENS, admin_client, park_for_budget
from tests.browser.ui import Ui
from tests.system.conftest import Stack, wait_until

pytestmark = [pytest.mark.system, pytest.mark.browser]

SESSION_COOKIE = "berth_session"
# Five subjects: about a dozen steps for the open page to follow.
LONG_INPUT = "H100 memory bandwidth; A100 memory bandwidth; L4 memory bandwidth; spot preemption; kv cache size"
PAYLOAD = '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=1">'
FINAL = "completed"
# The step number and the step rows the page shows right now.
SHOWN_PROGRESS = """() => [parseInt(document.querySelector('#task-step').textContent.trim()) || 0,
                        document.querySelectorAll('table#steps tbody tr.step').length]"""


def test_the_tasks_list_shows_the_submitted_tasks(ui: Ui, stack: Stack) -> None:
    berth = admin_client(stack)
    berth.submit("research", "H100 memory bandwidth", budget=Budget(20_000), task_id="default:ui-list-research")
    berth.submit("research", "L4 memory bandwidth", budget=Budget(20_000), task_id="default:ui-list-other")
    berth.submit(
        "coordinator", "H100 versus A100 memory bandwidth", budget=Budget(40_000), task_id="default:ui-list-coord"
    )
    statuses = {s.value for s in TaskStatus}

    ui.login(stack.admin_key(), "/tasks")
    for task_id in ("default:ui-list-research", "default:ui-list-other", "default:ui-list-coord"):
        row = ui.page.locator(f"table#tasks tbody tr[data-task-id='{task_id}']")
        expect(row).to_have_count(1)
        assert row.locator("a.task-link").get_attribute("href") == f"/tasks/{task_id}"
        assert row.locator("td.status").inner_text().strip() in statuses

    ui.page.fill("form#task-filter input[name=q]", "default:ui-list-other")
    ui.submit("form#task-filter")
    rows = ui.page.locator("table#tasks tbody tr[data-task-id]")
    assert [rows.nth(i).get_attribute("data-task-id") for i in range(rows.count())] == ["default:ui-list-other"]


def test_a_wrong_key_is_refused_and_the_session_cookie_is_http_only(ui: Ui, stack: Stack) -> None:
    ui.open("/tasks")
    assert urlparse(ui.page.url).path == "/login"
    assert parse_qs(urlparse(ui.page.url).query)["next"] == ["/tasks"]

    refused = ui.login("berth_000000000000_not-a-key", "/tasks")
    assert refused.status == 401
    assert ui.flash()[0] == "error"
    assert SESSION_COOKIE not in {c["name"] for c in ui.page.context.cookies()}

    signed_in = ui.login(stack.admin_key(), "/tasks")
    assert signed_in.ok and urlparse(ui.page.url).path == "/tasks"
    cookie = next(c for c in ui.page.context.cookies() if c["name"] == SESSION_COOKIE)
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["path"] == "/"
    assert SESSION_COOKIE not in ui.page.evaluate("document.cookie")
    assert "admin" in ui.page.inner_text("#whoami")


def test_a_step_arrives_live_without_a_reload(ui: Ui, stack: Stack) -> None:
    # Parked until the budget is raised, so the page is surely open before the first step comes.
    task = park_for_budget(stack, "default:ui-live", LONG_INPUT)
    ui.login(stack.admin_key(), "/tasks/default:ui-live")
    page = ui.page
    page.evaluate("window.__samePage = true")
    navigations: list[str] = []
    page.on("framenavigated", lambda frame: navigations.append(frame.url))
    expect(page.locator("#live")).to_have_attribute("data-live", "on")
    shown = page.evaluate(SHOWN_PROGRESS)

    task.raise_budget(60_000)
    page.wait_for_function(
        f"([step, rows]) => {{ const now = ({SHOWN_PROGRESS})(); return now[0] > step && now[1] > rows; }}",
        arg=shown,
        timeout=60_000,
    )
    ui.shot("tasks-ui-live-after-a-step")
    expect(page.locator("#live")).to_have_attribute("data-live", "ended", timeout=90_000)
    expect(page.locator("#task-status")).to_have_text(FINAL)
    ui.shot("tasks-ui-live-ended")
    assert page.evaluate("window.__samePage") is True
    assert navigations == []


def test_raising_the_budget_from_the_page_resumes_the_task(ui: Ui, stack: Stack) -> None:
    task = park_for_budget(stack, "default:ui-budget", "L4 memory bandwidth")

    ui.login(stack.admin_key(), "/tasks/default:ui-budget")
    expect(ui.page.locator("#task-status")).to_have_text("awaiting_budget")
    ui.page.fill("form#raise-budget input[name=tokens]", "20000")
    ui.submit_ok("form#raise-budget")
    assert task.status().spend.token_limit == PARKED_TOKENS + 20_000

    status = ui.page.locator("#task-status")
    expect(status).not_to_have_text("awaiting_budget", timeout=30_000)
    expect(status).to_have_text(FINAL, timeout=90_000)
    expect(ui.page.locator("#budget-bar")).to_have_attribute("data-limit", str(PARKED_TOKENS + 20_000))
    ui.shot("tasks-ui-budget-completed")


def test_text_from_a_task_is_shown_literally_and_never_run(ui: Ui, stack: Stack) -> None:
    task = admin_client(stack).submit(
        "research", f"H100 memory bandwidth {PAYLOAD}", budget=Budget(20_000), task_id="default:ui-escape"
    )
    wait_until(lambda: task.checkpoints(), 60, "a checkpoint of default:ui-escape")

    ui.login(stack.admin_key(), "/tasks/default:ui-escape")
    assert PAYLOAD in (ui.page.text_content("main") or "")
    assert ui.page.evaluate("typeof window.__pwned") == "undefined"
    href = ui.page.locator("table#checkpoints tbody tr[data-seq] a").first.get_attribute("href")
    assert href is not None
    ui.open(href)
    assert PAYLOAD in ui.page.inner_text("#checkpoint")
    assert ui.page.locator("#checkpoint img[src=x], #checkpoint script").count() == 0
    ui.open("/tasks?q=default:ui-escape")
    assert ui.page.evaluate("typeof window.__pwned") == "undefined"


def test_the_answer_shows_as_it_is_written_then_moves_into_the_steps(ui: Ui, stack: Stack) -> None:
    task = park_for_budget(stack, "default:ui-writing", "berths\nlength: 3000 tokens", agent="writer")
    ui.login(stack.admin_key(), "/tasks/default:ui-writing")
    page = ui.page
    expect(page.locator("#live")).to_have_attribute("data-live", "on")
    expect(page.locator("#writing-box")).to_be_hidden()

    task.raise_budget(60_000)
    page.wait_for_function(
        "() => document.querySelector('#writing').textContent.startsWith('Report on berths.')", timeout=90_000
    )
    ui.shot("tasks-ui-writing")
    expect(page.locator("#writing-step")).to_have_text(re.compile(r"^step \d+$"))
    expect(page.locator("#live")).to_have_attribute("data-live", "ended", timeout=120_000)
    expect(page.locator("#writing-box")).to_be_hidden()
    expect(page.locator("#task-status")).to_have_text(FINAL)
