"""The admin pages in Chromium: the tenants table's inputs under their headers, a tenant made with a default
dollar budget, a key revoked only once the dialog is confirmed, and the audit log filtered down to one request.

Each page is also shot at a desktop (1400×900) and a phone (390×844) width, to be looked at."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from playwright.sync_api import expect

from tests.browser.through_api import make_key
from tests.browser.ui import Ui
from tests.system.conftest import Stack

pytestmark = [pytest.mark.system, pytest.mark.browser]

DESKTOP = {"width": 1400, "height": 900}
PHONE = {"width": 390, "height": 844}
# The header text above a cell of a row: what a reader sees when they look up from an input.
HEADER_ABOVE = """el => {
    const cell = el.closest('td, th');
    return cell.closest('table').tHead.rows[0].cells[cell.cellIndex].textContent.trim();
}"""


def shoot_both_widths(ui: Ui, label: str) -> None:
    """The page as it is now, at the desktop and then the phone width, and back."""
    for name, size in (("desktop", DESKTOP), ("phone", PHONE)):
        ui.page.set_viewport_size(size)
        ui.shot(f"{label}-{name}")
    ui.page.set_viewport_size(DESKTOP)


def key_state(stack: Stack, key_id: str) -> str | None:
    [key] = [k for k in stack.http.get("/v1/keys").json() if k["key_id"] == key_id]
    return key["revoked_at"]


def test_a_tenant_is_made_with_a_default_dollar_budget_and_each_input_sits_under_its_header(
    ui: Ui, stack: Stack
) -> None:
    name = f"ui-co-{uuid.uuid4().hex[:6]}"
    ui.login(stack.admin_key(), "/tenants")
    ui.page.set_viewport_size(DESKTOP)
    create = ui.page.locator("form#create-tenant")
    create.get_by_label("Name").fill(name)
    create.get_by_label("Default budget (tokens)").fill("50000")
    create.get_by_label("Default budget ($)").fill("2.5")
    ui.submit_ok("form#create-tenant")
    tenant = stack.http.get(f"/v1/tenants/{name}").json()
    assert (tenant["default_budget_tokens"], tenant["default_budget_usd"]) == (50_000, 2.5)

    row = ui.page.locator(f"table#tenants tr[data-tenant='{name}']")
    for field, header, value in (
        ("trust", "Trust", "shared"),
        ("gpu_quota", "GPU quota (GPUs)", ""),
        ("default_budget_tokens", "Default budget (tokens)", "50000"),
        ("default_budget_usd", "Default budget ($)", "2.5"),
    ):
        control = row.locator(f"[name={field}]")
        assert control.evaluate(HEADER_ABOVE) == header, field
        expect(control).to_have_value(value)
        expect(control).to_have_attribute("form", f"tenant-update-{name}")
    assert "$" in row.locator("[name=default_budget_usd]").evaluate(HEADER_ABOVE)
    expect(row.get_by_label(f"Default budget ($) of tenant {name}")).to_have_value("2.5")
    expect(row.locator("td[data-col=default_budget_usd] small.now")).to_have_text("saved: $2.50")
    shoot_both_widths(ui, "tenants")

    # Inputs in their own cells still save with their row's form (the Save button in the last cell).
    row.locator("[name=gpu_quota]").fill("3")
    row.locator("[name=default_budget_usd]").fill("4.75")
    ui.submit_ok(f"form#tenant-update-{name}")
    tenant = stack.http.get(f"/v1/tenants/{name}").json()
    assert (tenant["gpu_quota"], tenant["default_budget_tokens"], tenant["default_budget_usd"]) == (3, 50_000, 4.75)
    expect(row.locator("td[data-col=gpu_quota] small.now")).to_have_text("saved: 3 GPUs")


def test_a_key_is_revoked_only_when_the_dialog_is_confirmed(ui: Ui, stack: Stack) -> None:
    key_id = make_key(stack, "viewer", "ui-revoke-me").split("_")[1]
    ui.login(stack.admin_key(), "/tenants")
    row = ui.page.locator(f"table#keys tr[data-key-id='{key_id}']")
    expect(row.locator("td.key-state")).to_have_text("live")
    button = row.locator("form.revoke button")
    dialog = ui.page.locator("#confirm-dialog")

    button.click()
    expect(dialog).to_be_visible()
    expect(ui.page.locator("#confirm-text")).to_have_text(
        f"Revoke key {key_id} (role viewer, all tenants, name ui-revoke-me): every client using it is refused at once"
        " and its open event streams end. This cannot be undone."
    )
    ui.shot("revoke-dialog")
    ui.page.click("#confirm-cancel")
    expect(dialog).to_be_hidden()
    assert key_state(stack, key_id) is None
    expect(row.locator("td.key-state")).to_have_text("live")

    button.click()
    with ui.page.expect_navigation():
        ui.page.click("#confirm-ok")
    ui.shot("revoked")
    assert ui.flash()[0] == "ok" and key_id in ui.flash()[1]
    assert key_state(stack, key_id) is not None
    revoked = ui.page.locator(f"table#keys tr[data-key-id='{key_id}']")
    expect(revoked).to_have_class("revoked")
    expect(revoked.locator("td.key-state .badge")).to_have_text("revoked")
    expect(revoked.locator("form.revoke")).to_have_count(0)


def test_the_audit_log_is_filtered_to_one_request_and_its_role_reads_as_a_word(ui: Ui, stack: Stack) -> None:
    key = make_key(stack, "admin", "ui-auditor")
    key_id = key.split("_")[1]
    auditor = {"authorization": f"Bearer {key}"}
    tenant = f"ui-audit-{uuid.uuid4().hex[:6]}"
    assert stack.http.post("/v1/tenants", json={"name": tenant}, headers=auditor).status_code == 201
    assert stack.http.patch(f"/v1/tenants/{tenant}", json={"gpu_quota": -1}, headers=auditor).status_code == 422
    assert stack.http.patch(f"/v1/tenants/{tenant}", json={"gpu_quota": 2}, headers=auditor).status_code == 200

    ui.login(stack.admin_key(), "/audit")
    form = ui.page.locator("form#audit-filter")
    form.get_by_label("Key id").fill(key_id)
    form.get_by_label("Method").select_option("PATCH")
    form.get_by_label("Path contains").fill(tenant)
    form.get_by_label("Status").select_option("refused")
    ui.submit("form#audit-filter")
    rows = ui.page.locator("table#audit tbody tr[data-audit-id]")
    expect(rows).to_have_count(1)
    expect(rows.locator("td.action")).to_have_text(f"PATCH /v1/tenants/{tenant}")
    expect(rows.locator("td.status")).to_have_text("422")
    expect(rows.locator("td.role")).to_have_text("admin")
    expect(rows.locator("td.when")).to_contain_text(" UTC")

    form.get_by_label("Status").select_option("any")
    ui.submit("form#audit-filter")
    expect(rows).to_have_count(2)
    # A window that ended before the requests were made shows none of them; the last hour shows them all.
    before = (datetime.now(UTC) - timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M")
    form.get_by_label("Until (UTC)").fill(before)
    ui.submit("form#audit-filter")
    expect(rows).to_have_count(0)
    with ui.page.expect_navigation():
        ui.page.click("a[data-range='1h']")
    expect(rows).to_have_count(2)
    expect(ui.page.locator("#audit-window")).to_contain_text("last hour")
    expect(ui.page.locator("form#audit-filter input[name=key_id]")).to_have_value(key_id)

    # A time no datetime input would send (a hand-made link): refused, naming the field, the other filters kept.
    assert ui.open(f"/audit?key_id={key_id}&since=not-a-time").status == 422
    expect(ui.page.locator("#flash")).to_contain_text("since: 'not-a-time' is not a time")
    expect(ui.page.locator("form#audit-filter input[name=key_id]")).to_have_value(key_id)
    ui.open("/audit")
    shoot_both_widths(ui, "audit")
