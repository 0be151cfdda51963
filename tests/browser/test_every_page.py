"""Every page of the UI, as an admin sees it after a task has run: it renders, keeps to its
Content-Security-Policy (a violation is a console error), and leaves a screenshot."""

from __future__ import annotations

import pytest
from playwright.sync_api import ConsoleMessage, expect

from sdk import Budget
from tests.browser.through_api import admin_client
from tests.browser.ui import Ui
from tests.system.conftest import Stack

pytestmark = [pytest.mark.system, pytest.mark.browser]

# Each page and the element that proves it rendered its own content, not an error page.
PAGES = {
    "/": "#overview svg.chart#chart-tokens",
    "/tasks": "table#tasks tr[data-task-id='default:ui-pages-task']",
    "/tasks/default:ui-pages-task": "table#steps tr.step",
    "/tasks/default:ui-pages-task/checkpoints/1": "#checkpoint .message",
    "/fleet": "section.datacenter tr.node",
    "/models": "form.policy[data-model='llama-3.2-1b']",
    "/tenants": "table#keys tr[data-key-id]",
    "/audit": "table#audit tbody tr",
}


def test_every_page_renders_within_its_content_security_policy(ui: Ui, stack: Stack) -> None:
    admin_client(stack).submit("research", "L4 memory bandwidth", budget=Budget(20_000),
                               task_id="default:ui-pages-task").result(timeout=120)
    problems: list[str] = []
    ui.page.on("console", lambda m: problems.append(m.text) if _is_problem(m) else None)
    ui.page.on("pageerror", lambda e: problems.append(str(e)))
    ui.login(stack.admin_key())
    for path, proof in PAGES.items():
        answer = ui.open(path)
        assert answer.status == 200, path
        expect(ui.page.locator(proof).first).to_be_visible()
    assert problems == []


def _is_problem(message: ConsoleMessage) -> bool:
    return message.type == "error" or "Content Security Policy" in message.text
