"""The tenants-and-keys page and the audit page over HTTP, in-process: each input under its own header, a
refused form shown again as typed, revoking that says what it does, and the audit log's filters with their
refusals (what tests/browser/test_admin_pages.py sees in Chromium, checked here on the server's side)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from html import unescape
from html.parser import HTMLParser

import httpx
import pytest
from api_helpers import unique
from sqlmodel import Session
from ui_helpers import SignIn, csrf_of, flash_of

from orchestrator.store import Store
from orchestrator.store.tables import AuditRow
from sdk.wire.identity import Role, TenantSpec


@dataclass
class Cell:
    text: str = ""
    fields: list[dict[str, str]] = field(default_factory=list)  # the inputs and selects in it, their attributes


@dataclass
class Table:
    headers: list[str] = field(default_factory=list)
    rows: list[tuple[dict[str, str], list[Cell]]] = field(default_factory=list)  # (the tr's attributes, its cells)

    def column(self, header: str) -> int:
        return next(i for i, h in enumerate(self.headers) if h == header)

    def row(self, attribute: str, value: str) -> list[Cell]:
        return next(cells for attrs, cells in self.rows if attrs.get(attribute) == value)


class _Tables(HTMLParser):
    """The page's tables by id: header texts and each body row's cells (their text and form fields)."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, Table] = {}
        self._table: Table | None = None
        self._cell: Cell | None = None
        self._in_head = False
        self._row: list[Cell] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = {k: v or "" for k, v in attrs}
        if tag == "table" and "id" in found:
            self._table = self.tables[found["id"]] = Table()
        elif self._table is None:
            return
        elif tag == "thead":
            self._in_head = True
        elif tag == "tr" and not self._in_head:
            self._row = []
            self._table.rows.append((found, self._row))
        elif tag in ("td", "th"):
            self._cell = Cell()
            if not self._in_head and self._row is not None:
                self._row.append(self._cell)
        elif tag in ("input", "select") and self._cell is not None:
            self._cell.fields.append({"tag": tag, **found})

    def handle_endtag(self, tag: str) -> None:
        if self._table is None:
            return
        if tag in ("td", "th") and self._cell is not None:
            if self._in_head:
                self._table.headers.append(" ".join(self._cell.text.split()))
            self._cell.text = " ".join(self._cell.text.split())
            self._cell = None
        elif tag == "thead":
            self._in_head = False
        elif tag == "table":
            self._table = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.text += data


def tables_of(page: httpx.Response) -> dict[str, Table]:
    parser = _Tables()
    parser.feed(page.text)
    return parser.tables


def form_of(page: httpx.Response, form_id: str) -> str:
    found = re.search(rf'<form[^>]* id="{re.escape(form_id)}".*?</form>', page.text, re.S)
    assert found, form_id
    return found.group(0)


# --- tenants and keys ------------------------------------------------------------------------


async def test_each_tenant_input_sits_under_its_header_and_saves_with_its_row(sign_in: SignIn, store: Store) -> None:
    name = unique("acme")
    store.tenants.create(TenantSpec(name=name, gpu_quota=8, default_budget_tokens=1_000_000, default_budget_usd=2.5))
    admin = await sign_in()
    page = await admin.get("/tenants")
    table = tables_of(page)["tenants"]
    row = table.row("data-tenant", name)
    assert len(row) == len(table.headers)
    for header, field_name, value, saved in (
        ("GPU quota (GPUs)", "gpu_quota", "8", "saved: 8 GPUs"),
        ("Default budget (tokens)", "default_budget_tokens", "1000000", "saved: 1,000,000 tokens"),
        ("Default budget ($)", "default_budget_usd", "2.5", "saved: $2.50"),
    ):
        cell = row[table.column(header)]
        [input_] = cell.fields
        assert (input_["name"], input_["value"], input_["form"]) == (field_name, value, f"tenant-update-{name}")
        assert input_["aria-label"] == f"{header} of tenant {name}" and saved in cell.text
    assert row[table.column("Trust")].fields[0]["form"] == f"tenant-update-{name}"
    assert re.search(
        rf'<form class="tenant-update" id="tenant-update-{name}" method="post" action="/tenants/{name}">', page.text
    )

    saved = await admin.post(
        f"/tenants/{name}",
        data={
            "csrf_token": csrf_of(page),
            "trust": "isolated",
            "gpu_quota": "4",
            "default_budget_tokens": "",
            "default_budget_usd": "7.25",
        },
    )
    assert saved.status_code == 303
    tenant = store.tenants.get(name)
    assert tenant is not None
    assert (tenant.trust.value, tenant.gpu_quota, tenant.default_budget_tokens, tenant.default_budget_usd) == (
        "isolated",
        4,
        None,
        7.25,
    )
    row = tables_of(await admin.get("/tenants"))["tenants"].row("data-tenant", name)
    assert "saved: none" in row[table.column("Default budget (tokens)")].text


async def test_a_refused_tenant_change_is_shown_again_as_typed(sign_in: SignIn, store: Store) -> None:
    name = unique("acme")
    store.tenants.create(TenantSpec(name=name, gpu_quota=8))
    admin = await sign_in()
    page = await admin.get("/tenants")
    refused = await admin.post(
        f"/tenants/{name}",
        data={
            "csrf_token": csrf_of(page),
            "trust": "dedicated",
            "gpu_quota": "3",
            "default_budget_tokens": "12",
            "default_budget_usd": "-1",
        },
    )
    assert refused.status_code == 422 and flash_of(refused).startswith("error: default_budget_usd: ")
    table = tables_of(refused)["tenants"]
    row = table.row("data-tenant", name)
    assert row[table.column("GPU quota (GPUs)")].fields[0]["value"] == "3"  # as typed, to fix
    assert row[table.column("Default budget ($)")].fields[0]["value"] == "-1"
    assert "saved: 8 GPUs" in row[table.column("GPU quota (GPUs)")].text  # beside what is still saved
    assert store.tenants.get(name).gpu_quota == 8  # type: ignore[union-attr]


async def test_a_tenant_is_created_with_a_default_dollar_budget(sign_in: SignIn, store: Store) -> None:
    admin = await sign_in()
    page = await admin.get("/tenants")
    assert 'name="default_budget_usd"' in form_of(page, "create-tenant")
    name = unique("newco")
    created = await admin.post(
        "/tenants",
        data={
            "csrf_token": csrf_of(page),
            "name": name,
            "trust": "shared",
            "gpu_quota": "",
            "default_budget_tokens": "50000",
            "default_budget_usd": "3.5",
        },
    )
    assert created.status_code == 303
    tenant = store.tenants.get(name)
    assert tenant is not None and (tenant.default_budget_tokens, tenant.default_budget_usd) == (50_000, 3.5)
    refused = await admin.post(
        "/tenants", data={"csrf_token": csrf_of(page), "name": "Not A Name", "default_budget_usd": "3.5"}
    )
    assert refused.status_code == 422 and flash_of(refused).startswith("error: name: ")
    form = form_of(refused, "create-tenant")
    assert 'value="Not A Name"' in form and 'value="3.5"' in form


async def test_revoking_a_key_says_what_it_does_and_revoked_keys_are_marked(sign_in: SignIn, store: Store) -> None:
    tenant = store.tenants.create(TenantSpec(name=unique("acme"))).name
    key = store.keys.create(Role.agent, tenant, name="tool runner", description="the nightly report job")
    admin = await sign_in()
    page = await admin.get("/tenants")
    table = tables_of(page)["keys"]
    row = table.row("data-key-id", key.key_id)
    assert "tool runner" in row[1].text and "the nightly report job" in row[1].text and "live" in row[6].text
    form = re.search(rf'<form[^>]*action="/keys/{key.key_id}/revoke"[^>]*>', page.text)
    assert form and 'class="revoke destructive"' in form.group(0)
    assert unescape(re.search(r'data-confirm="([^"]*)"', form.group(0)).group(1)) == (  # type: ignore[union-attr]
        f"Revoke key {key.key_id} (role agent, tenant {tenant}, name tool runner): every client using it is "
        "refused at once and its open event streams end. This cannot be undone."
    )
    revoked = await admin.post(f"/keys/{key.key_id}/revoke", data={"csrf_token": csrf_of(page)})
    assert revoked.status_code == 303
    page = await admin.get("/tenants")
    assert "revoked" in flash_of(page)
    attrs, cells = next(r for r in tables_of(page)["keys"].rows if r[0].get("data-key-id") == key.key_id)
    assert attrs.get("class") == "revoked" and cells[6].text.startswith("revoked ") and cells[6].text.endswith(" UTC")
    assert f'action="/keys/{key.key_id}/revoke"' not in page.text


async def test_a_key_is_made_with_a_description_and_a_refused_one_keeps_the_form(sign_in: SignIn, store: Store) -> None:
    admin = await sign_in()
    page = await admin.get("/tenants")
    refused = await admin.post(
        "/keys",
        data={
            "csrf_token": csrf_of(page),
            "role": "agent",
            "tenant": "",
            "name": "no tenant",
            "description": "should fail",
        },
    )
    assert refused.status_code == 422
    form = form_of(refused, "create-key")
    assert 'value="no tenant"' in form and 'value="should fail"' in form and "<option selected>agent" in form
    made = await admin.post(
        "/keys",
        data={
            "csrf_token": csrf_of(page),
            "role": "viewer",
            "tenant": "",
            "name": "dashboards",
            "description": "read-only wall screen",
        },
    )
    assert made.status_code == 201
    [view] = [k for k in store.keys.list() if k.name == "dashboards"]
    assert view.description == "read-only wall screen" and view.tenant is None


# --- the audit log ---------------------------------------------------------------------------


def put_row(
    store: Store,
    *,
    path: str,
    at: datetime,
    method: str = "POST",
    status: int = 200,
    key_id: str = "k-audit",
    role: str = "admin",
) -> None:
    with Session(store.engine) as session:
        session.add(
            AuditRow(key_id=key_id, role=role, tenant=None, method=method, path=path, target=None, status=status, at=at)
        )
        session.commit()


def audit_paths(page: httpx.Response) -> list[str]:
    table = tables_of(page)["audit"]
    action = table.column("Action")
    return [cells[action].text.split(" ", 1)[1] for attrs, cells in table.rows if "data-audit-id" in attrs]


async def test_the_audit_roles_read_as_words_and_times_as_utc(sign_in: SignIn, store: Store) -> None:
    put_row(store, path="/old-row", at=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC), role="Role.admin")
    admin = await sign_in()
    page = await admin.get("/audit?path=old-row")
    table = tables_of(page)["audit"]
    [(_, cells)] = [r for r in table.rows if "data-audit-id" in r[0]]
    assert cells[table.column("Role")].text == "admin"
    assert cells[table.column("When (UTC)")].text == "2026-01-02 03:04:05 UTC"
    # The sign-in itself is audited under the role of its key, as a word.
    login = tables_of(await admin.get("/audit?path=/login"))["audit"]
    assert {cells[login.column("Role")].text for _, cells in login.rows} == {"admin"}
    assert "Role." not in (await admin.get("/audit")).text


async def test_the_audit_log_is_filtered_by_action_status_key_and_time(sign_in: SignIn, store: Store) -> None:
    t0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    put_row(store, path="/v1/tasks", at=t0, status=201)
    put_row(store, path="/keys/k9/revoke", at=t0 + timedelta(minutes=1), status=303, key_id="k-other")
    put_row(store, path="/v1/tenants/x", at=t0 + timedelta(minutes=2), method="PATCH", status=422)
    put_row(store, path="/v1/keys/k9", at=t0 + timedelta(minutes=3), method="DELETE", status=404)
    admin = await sign_in()
    window = "since=2026-03-01T12:00&until=2026-03-01T12:03"  # until takes in its whole minute

    async def shown(query: str) -> list[str]:
        page = await admin.get(f"/audit?{query}")
        assert page.status_code == 200, page.text[:500]
        return audit_paths(page)

    assert await shown(window) == ["/v1/keys/k9", "/v1/tenants/x", "/keys/k9/revoke", "/v1/tasks"]
    assert await shown(f"{window}&method=patch") == ["/v1/tenants/x"]
    assert await shown(f"{window}&path=K9") == ["/v1/keys/k9", "/keys/k9/revoke"]
    assert await shown(f"{window}&status=refused") == ["/v1/keys/k9", "/v1/tenants/x"]
    assert await shown(f"{window}&status=done") == ["/keys/k9/revoke", "/v1/tasks"]
    assert await shown(f"{window}&status=404") == ["/v1/keys/k9"]
    assert await shown(f"{window}&key_id=k-other") == ["/keys/k9/revoke"]
    assert await shown("since=2026-03-01T12:01:00&until=2026-03-01T12:02:00") == ["/v1/tenants/x", "/keys/k9/revoke"]
    assert await shown("since=2026-03-01T12:01&until=2026-03-01T12:01:59") == ["/keys/k9/revoke"]
    # The filters are shown back as they were asked for.
    page = await admin.get(f"/audit?{window}&method=DELETE&status=404&key_id=k-audit&path=k9")
    form = form_of(page, "audit-filter")
    for shown_back in (
        'value="2026-03-01T12:00"',
        'value="2026-03-01T12:03"',
        "<option selected>DELETE",
        "<option selected>404",
        'value="k-audit"',
        'value="k9"',
    ):
        assert shown_back in form, shown_back


async def test_a_quick_range_is_a_since_of_now(sign_in: SignIn, store: Store) -> None:
    now = datetime.now(UTC)
    put_row(store, path="/recent", at=now - timedelta(minutes=30))
    put_row(store, path="/yesterday", at=now - timedelta(hours=20))
    put_row(store, path="/last-week", at=now - timedelta(days=5))
    admin = await sign_in()
    seen = {}
    for quick in ("1h", "24h", "7d"):
        page = await admin.get(f"/audit?range={quick}&method=POST&path=/")
        seen[quick] = [p for p in audit_paths(page) if p in ("/recent", "/yesterday", "/last-week")]
        assert "Showing the last" in page.text
        assert re.search(r'name="since" value="\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d"', page.text)
    assert seen == {"1h": ["/recent"], "24h": ["/yesterday", "/recent"], "7d": ["/last-week", "/yesterday", "/recent"]}
    page = await admin.get("/audit?method=POST&since=2026-01-01T00:00")
    link = re.search(r'<a href="([^"]+)" data-range="1h">', page.text)
    assert link and unescape(link.group(1)) == "?method=POST&range=1h"  # the range replaces since/until


@pytest.mark.parametrize(
    ("query", "field_name"),
    [
        ("since=yesterday", "since"),
        ("until=2026-02-30T10:00", "until"),
        ("since=2026-03-01T12:00&until=2026-03-01T11:00", "until"),
        ("status=teapot", "status"),
        ("status=999", "status"),
        ("method=GET", "method"),
        ("range=2h", "range"),
        ("range=1h&since=2026-03-01T12:00", "range"),
    ],
)
async def test_a_bad_audit_filter_is_refused_naming_its_field(sign_in: SignIn, query: str, field_name: str) -> None:
    admin = await sign_in()
    page = await admin.get(f"/audit?{query}&key_id=kept")
    assert page.status_code == 422
    assert flash_of(page).startswith(f"error: {field_name}: ")
    assert 'name="key_id" value="kept"' in form_of(page, "audit-filter")  # nothing typed is lost


@pytest.mark.parametrize(
    "query", ["key_id=" + "k" * 65, "path=" + "p" * 201, "since=" + "1" * 41, "page=0", "page=10001"]
)
async def test_audit_parameters_are_bounded(sign_in: SignIn, query: str) -> None:
    admin = await sign_in()
    page = await admin.get(f"/audit?{query}")
    assert page.status_code == 422 and query.split("=")[0] in page.text


async def test_audit_paging_links_keep_the_filters(sign_in: SignIn, store: Store) -> None:
    t0 = datetime(2026, 4, 1, tzinfo=UTC)
    for i in range(205):
        put_row(store, path=f"/v1/paged/{i}", at=t0 + timedelta(seconds=i), status=409, key_id="k-paged")
    admin = await sign_in()
    first = await admin.get("/audit?key_id=k-paged&status=refused&path=paged")
    assert len(audit_paths(first)) == 200
    older = re.search(r'<a href="([^"]+)" rel="next">older</a>', first.text)
    assert older and unescape(older.group(1)) == "?key_id=k-paged&path=paged&status=refused&page=2"
    second = await admin.get("/audit" + unescape(older.group(1)))
    assert audit_paths(second) == [f"/v1/paged/{i}" for i in range(4, -1, -1)]
    newer = re.search(r'<a href="([^"]+)" rel="prev">newer</a>', second.text)
    assert newer and unescape(newer.group(1)) == "?key_id=k-paged&path=paged&status=refused&page=1"
