"""The fleet and models pages' actions, and the guards around every form: CSRF tokens and roles."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator

import pytest
from playwright.sync_api import expect

from sdk import TaskStatus
from tests.browser.through_api import PARKED_TOKENS, make_key, park_for_budget
from tests.browser.ui import CSRF_FIELD, CSRF_REFUSED, Ui
from tests.system.conftest import Stack

pytestmark = [pytest.mark.system, pytest.mark.browser]

# The spot node: the one the tasks here would least want, so draining it for a moment disturbs nothing.
NODE = "gpu-east-b"
NODE_ROW = f"tr.node[data-node-id='{NODE}']"
# A model no test here runs, so a changed policy starts or stops nothing they depend on.
MODEL = "qwen2.5-7b"
POLICY_FORM = f"form.policy[data-model='{MODEL}']"


def node_status(stack: Stack) -> str:
    return stack.http.get(f"/v1/nodes/{NODE}").json()["status"]


def policy(stack: Stack) -> dict:
    return stack.http.get(f"/v1/models/{MODEL}/policy").json()


@pytest.fixture(autouse=True)
def node_put_back(stack: Stack) -> Iterator[None]:
    """A test that fails halfway through leaves the node draining; the next one must not start so."""
    yield
    stack.http.post(f"/v1/nodes/{NODE}/undrain").raise_for_status()


def test_draining_a_node_from_the_fleet_page_and_back(ui: Ui, stack: Stack) -> None:
    ui.login(stack.admin_key(), "/fleet")
    status = ui.page.locator(f"{NODE_ROW} td.node-status")
    expect(status).to_have_text("healthy")

    said = ui.confirm(f"{NODE_ROW} form.drain", "cancel")
    assert said.startswith(f"Drain {NODE}: no new work is placed on it; the 0 step(s) running there finish first")
    expect(status).to_have_text("healthy")  # cancelled: nothing was sent
    assert node_status(stack) == "healthy"

    ui.confirm(f"{NODE_ROW} form.drain", "ok")
    assert ui.flash()[0] == "ok"
    expect(status).to_have_text("draining")
    assert node_status(stack) == "draining"

    ui.submit_ok(f"{NODE_ROW} form.undrain")
    expect(status).to_have_text("healthy")
    assert node_status(stack) == "healthy"


def test_preempting_asks_first_and_names_the_notice_as_typed(ui: Ui, stack: Stack) -> None:
    ui.login(stack.admin_key(), "/fleet")
    form = f"{NODE_ROW} form.preempt"
    expect(ui.page.locator(f"{form} label")).to_have_text(re.compile(r"^\s*notice\s+s\s*$"))  # with its unit
    ui.page.fill(f"{form} input[name=notice_s]", "45")
    said = ui.confirm(form, "cancel")
    assert said.startswith(f"Preempt {NODE}: it leaves within 45 s. The 0 step(s) running on it resume on other nodes")
    expect(ui.page.locator("#confirm-ok")).to_have_text("Preempt")  # the button that sends it says what it does
    expect(ui.page.locator(f"{NODE_ROW} td.node-status")).to_have_text("healthy")
    assert node_status(stack) == "healthy"


def test_a_scaling_policy_is_saved_and_min_above_max_is_refused(ui: Ui, stack: Stack) -> None:
    ui.login(stack.admin_key(), "/models")
    ui.page.click(f"details.policy-box[data-model='{MODEL}'] > summary")  # the form is folded until asked for
    ui.page.fill(f"{POLICY_FORM} input[name=max_replicas]", "3")
    ui.page.fill(f"{POLICY_FORM} input[name=idle_timeout_s]", "120")
    ui.submit_ok(POLICY_FORM)
    saved = policy(stack)
    assert (saved["min_replicas"], saved["max_replicas"], saved["idle_timeout_s"]) == (0, 3, 120)

    ui.page.click(f"details.policy-box[data-model='{MODEL}'] > summary")
    ui.page.fill(f"{POLICY_FORM} input[name=min_replicas]", "5")
    refused = ui.submit(POLICY_FORM)
    assert refused.status == 422
    kind, text = ui.flash()
    assert kind == "error" and "min_replicas" in text
    expect(ui.page.locator(f"{POLICY_FORM} input[name=min_replicas]")).to_have_value("5")
    assert policy(stack) == saved


def test_a_forged_form_without_the_csrf_token_is_refused(ui: Ui, stack: Stack) -> None:
    ui.login(stack.admin_key(), "/fleet")
    action, fields = ui.form(f"{NODE_ROW} form.drain")
    # A form another page could make: the same action and fields, but it cannot know the token.
    with ui.page.expect_navigation() as navigation:
        ui.page.evaluate(
            """([action, fields]) => {
            const f = Object.assign(document.createElement('form'), {method: 'post', action});
            for (const [name, value] of Object.entries(fields)) {
                f.append(Object.assign(document.createElement('input'), {name, value}));
            }
            document.body.append(f);
            f.submit();
        }""",
            [action, fields],
        )
    ui.shot("forged-drain")
    assert navigation.value.status == 403
    assert CSRF_REFUSED in ui.page.inner_text("body")
    wrong = ui.forge_post(action, {**fields, CSRF_FIELD: "0" * 32})
    assert wrong.status == 403 and CSRF_REFUSED in html.unescape(wrong.text())
    assert node_status(stack) == "healthy"

    # The same forger with the page's token is let through: the refusals above were the token's doing.
    ui.open("/fleet")
    undrain_action, undrain_fields = ui.form(f"{NODE_ROW} form.undrain")
    assert ui.forge_post(undrain_action, {**undrain_fields, CSRF_FIELD: ui.csrf_token()}).status == 303


def test_a_viewer_sees_disabled_buttons_and_cannot_forge_a_post(ui: Ui, stack: Stack) -> None:
    task = park_for_budget(stack, "default:ui-viewer", "L4 memory bandwidth")
    ui.login(make_key(stack, "viewer", "ui-viewer"), "/fleet")
    assert "viewer" in ui.page.inner_text("#whoami")
    assert_buttons_disabled(ui, f"{NODE_ROW} form.drain, {NODE_ROW} form.undrain, {NODE_ROW} form.preempt")
    drain_action, drain_fields = ui.form(f"{NODE_ROW} form.drain")
    ui.open("/models")
    assert_buttons_disabled(ui, POLICY_FORM)
    ui.open("/tasks/default:ui-viewer")
    assert_buttons_disabled(ui, "form#raise-budget, form#cancel")
    raise_action, raise_fields = ui.form("form#raise-budget")
    token = ui.csrf_token()
    assert token
    menu = {a.get_attribute("href") for a in ui.page.locator("nav#menu a").all()}
    assert {"/tasks", "/fleet", "/models"} <= menu and not {"/tenants", "/audit"} & menu
    assert ui.open("/tenants").status == 403

    for forged in ({}, {CSRF_FIELD: "0" * 32}, {CSRF_FIELD: token}):
        assert ui.forge_post(drain_action, {**drain_fields, **forged}).status == 403
    assert ui.forge_post(raise_action, {**raise_fields, "tokens": "20000", CSRF_FIELD: token}).status == 403
    assert node_status(stack) == "healthy"
    state = task.status()
    assert state.status == TaskStatus.awaiting_budget and state.spend.token_limit == PARKED_TOKENS


def assert_buttons_disabled(ui: Ui, forms: str) -> None:
    """Every button of the matching forms is there, disabled, with a title saying why."""
    buttons = ui.page.locator(forms).locator("button")
    assert buttons.count() > 0, f"no buttons in {forms}"
    for button in buttons.all():
        expect(button).to_be_disabled()
        assert button.get_attribute("title"), f"a disabled button of {forms} gives no reason"
