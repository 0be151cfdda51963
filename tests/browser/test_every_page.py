"""Every page of the UI, as an admin sees it after a task has run and while another waits live, on a desktop screen
and on a phone: it renders, keeps to its Content-Security-Policy (a violation is a console error), is never wider
than the screen (wide tables scroll in their own box), and leaves a screenshot of each size under
tests/browser/artifacts/."""

from __future__ import annotations

import pytest
from playwright.sync_api import ConsoleMessage, expect

from sdk import Budget
from tests.browser.through_api import admin_client, park_for_budget
from tests.browser.ui import Ui
from tests.system.conftest import Stack

pytestmark = [pytest.mark.system, pytest.mark.browser]

# Each page and the element that proves it rendered its own content, not an error page.
PAGES = {
    "/": "#overview svg.chart#chart-tokens",
    "/tasks": "table#tasks tr[data-task-id='default:ui-pages-task']",
    "/tasks/default:ui-pages-task": "table#steps tr.step",
    "/tasks/default:ui-pages-task/checkpoints/1": "#checkpoint .message",
    # A live task (waiting for its budget): its page has the forms and the live parts a finished one has not.
    "/tasks/default:ui-pages-live": "#timeline-box svg#timeline",
    "/fleet": "section.datacenter tr.node",
    "/models": "#models-summary tr[data-model='llama-3.2-1b']",
    "/tenants": "table#keys tr[data-key-id]",
    "/audit": "table#audit tbody tr",
}

SCREENS = [(1400, 900), (390, 844)]  # a desktop and a phone


def test_every_page_renders_within_its_content_security_policy(ui: Ui, stack: Stack) -> None:
    admin_client(stack).submit(
        "research", "L4 memory bandwidth", budget=Budget(20_000), task_id="default:ui-pages-task"
    ).result(timeout=120)
    live = park_for_budget(stack, "default:ui-pages-live", "L4 memory bandwidth")
    problems: list[str] = []
    ui.page.on("console", lambda m: problems.append(m.text) if _is_problem(m) else None)
    ui.page.on("pageerror", lambda e: problems.append(str(e)))
    ui.login(stack.admin_key())
    for width, height in SCREENS:
        ui.page.set_viewport_size({"width": width, "height": height})
        for path, proof in PAGES.items():
            answer = ui.open(path, f"{width}x{height}")
            assert answer.status == 200, path
            expect(ui.page.locator(proof).first).to_be_visible()
            overflow = ui.page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
            assert overflow <= 0, f"{path} is {overflow} px wider than a {width} px screen: {_too_wide(ui)}"
    live.cancel()
    assert problems == []


def _too_wide(ui: Ui) -> list[str]:
    """The outermost elements that reach past the screen's right edge outside a scrolling box: what to fix."""
    return ui.page.evaluate("""() => {
        const out = [];
        for (const el of document.body.querySelectorAll("*")) {
            if (el.getBoundingClientRect().right <= window.innerWidth + 1 || el.closest(".scroll")) continue;
            if (el.parentElement && el.parentElement.getBoundingClientRect().right > window.innerWidth + 1
                && !el.parentElement.closest(".scroll") && el.parentElement !== document.body) continue;
            out.push(el.tagName.toLowerCase() + (el.id ? "#" + el.id : "") + "." + [...el.classList].join(".")
                     + " right=" + Math.round(el.getBoundingClientRect().right));
        }
        return out.slice(0, 8);
    }""")


def _is_problem(message: ConsoleMessage) -> bool:
    return message.type == "error" or "Content Security Policy" in message.text
