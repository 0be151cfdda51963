"""The console read as an operator reads it, in chromium against a real stack: a task's timeline with the cut where
its node was lost, a chart's axes and the tooltip under the pointer, and the Overview following the fleet with no
reload."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from sdk import Budget, TaskStatus
from tests.browser.through_api import admin_client
from tests.browser.ui import Ui
from tests.system.conftest import Stack

pytestmark = [pytest.mark.system, pytest.mark.browser]

SUBJECTS = "H100 memory bandwidth; A100 memory bandwidth; L4 memory bandwidth; spot preemption; kv cache size"


def test_a_task_interrupted_mid_way_shows_where_its_node_was_lost_on_the_timeline(ui: Ui, stack: Stack) -> None:
    berth = admin_client(stack)
    handle = berth.submit("research", SUBJECTS, budget=Budget(40_000), task_id="default:ui-console-cut")
    stack.wait_for_step(handle.task_id, 3, timeout_s=120)
    handle.simulate_preemption()
    handle.result(timeout=240)
    state = handle.status()
    assert state.status == TaskStatus.completed and state.interruptions == 1
    [cut] = handle.interruptions()

    ui.login(stack.admin_key(), f"/tasks/{handle.task_id}")
    timeline = ui.page.locator("svg#timeline")
    expect(timeline).to_be_visible()
    rows = timeline.locator("g.step-row")
    assert rows.count() == state.step  # a row per step, each step's booked call
    assert timeline.locator("rect.phase-generation").count() == state.step
    marks = timeline.locator("g.cut")
    expect(marks).to_have_count(1)
    tip = marks.first.get_attribute("data-tip") or ""
    assert f"{cut.data['node_id']} lost (simulated)" in tip and f"resumed on {cut.data['resumed_on']}" in tip, tip
    cut_row = marks.first.locator("xpath=..")  # the mark sits in the row of the step it cut
    assert cut_row.get_attribute("data-step") == str(cut.data["step"])

    marks.first.hover()
    expect(ui.page.locator("#chart-tip")).to_be_visible()
    expect(ui.page.locator("#chart-tip")).to_have_text(tip)
    ui.shot("timeline-cut-tooltip")
    # The steps' times read from the start: the first tick is 0, the others +N from it.
    ticks = timeline.locator("text.x-tick").all_text_contents()
    assert ticks[0] == "0" and all(t.startswith("+") for t in ticks[1:]) and len(ticks) >= 3, ticks
    # The result waits under its summary; the stream box is hidden on a finished task.
    expect(ui.page.locator("#task-result")).to_be_hidden()
    ui.page.click("details#result-box > summary")
    expect(ui.page.locator("#task-result")).to_have_text(state.result or "")
    expect(ui.page.locator("#page-live")).to_have_attribute("data-live", "ended")


def test_a_chart_has_a_time_axis_a_value_scale_and_a_tooltip_under_the_pointer(ui: Ui, stack: Stack) -> None:
    admin_client(stack).submit(
        "research", "L4 memory bandwidth", budget=Budget(20_000), task_id="default:ui-console-chart"
    ).result(timeout=120)
    ui.login(stack.admin_key(), "/")
    chart = ui.page.locator("svg#chart-tokens")
    expect(chart).to_be_visible()
    clock = chart.locator("text.x-tick").all_text_contents()
    assert len(clock) >= 5 and all(re.fullmatch(r"\d\d:\d\d", t) for t in clock), clock  # wall-clock ticks
    scale = [float(t.replace(",", "")) for t in chart.locator("text.y-tick").all_text_contents()]
    assert scale[0] == 0 and scale == sorted(scale) and len(scale) == 5, scale
    # Every panel of the page names the same window.
    windows = ui.page.locator("figure.panel figcaption .window").all_text_contents()
    assert len(windows) == 4 and len(set(windows)) == 1, windows

    bar = chart.locator("rect.hit").last  # the newest minute: the task's tokens
    bar.hover()
    shown = ui.page.locator("#chart-tip")
    expect(shown).to_be_visible()
    expect(shown).to_have_text(re.compile(r"^\d\d:\d\d:\d\d UTC — [\d,]+$"))
    expect(chart.locator("line.chart-guide")).to_have_class(re.compile(r"\bon\b"))
    ui.shot("chart-tooltip")
    ui.page.mouse.move(5, 5)
    expect(shown).to_be_hidden()


def test_the_overview_follows_the_fleet_without_a_reload(ui: Ui, stack: Stack) -> None:
    ui.login(stack.admin_key(), "/")
    marker = ui.page.locator("#page-live")
    expect(marker).to_have_attribute("data-live", "on", timeout=30_000)
    expect(marker).to_have_text(re.compile(r"^live · updated \d+ s ago$"))
    ui.page.evaluate("window.__same_page = true")
    calls = ui.page.locator(".card[data-metric='calls-1h'] .big")
    before = int(calls.inner_text().replace(",", ""))

    admin_client(stack).submit(
        "research", "A100 memory bandwidth", budget=Budget(20_000), task_id="default:ui-console-live"
    ).result(timeout=120)
    expect(calls).not_to_have_text(str(before), timeout=60_000)
    assert int(calls.inner_text().replace(",", "")) > before
    assert ui.page.evaluate("window.__same_page") is True  # swapped in place, not reloaded
    assert int(ui.page.locator("#live-region").get_attribute("data-refreshed") or 0) >= 1
    ui.shot("overview-after-live-update")
