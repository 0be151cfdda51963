"""The audit log's filters in the store (what the audit page narrows by): method, path, status, key and time,
alone and together, and roles that read as their bare value whatever wrote them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from sqlalchemy import text
from sqlmodel import Session

from orchestrator.store import Store
from orchestrator.store.audit import plain_role
from orchestrator.store.tables import AuditRow
from sdk.wire.identity import Role

pytestmark = pytest.mark.postgresql  # the filters' SQL must mean the same on SQLite and PostgreSQL

T0 = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)


def put(
    store: Store,
    *,
    path: str,
    method: str = "POST",
    status: int = 200,
    key_id: str | None = "k1",
    minutes: float = 0,
    role: str | None = "admin",
) -> None:
    """One row at T0 + `minutes` (record() stamps now; the time filters need rows of chosen times)."""
    with Session(store.engine) as session:
        session.add(
            AuditRow(
                key_id=key_id,
                role=role,
                tenant=None,
                method=method,
                path=path,
                target=None,
                status=status,
                at=T0 + timedelta(minutes=minutes),
            )
        )
        session.commit()


@pytest.fixture
def logged(store: Store) -> Store:
    """Six requests, a minute apart, of two keys: writes that were done and writes that were refused."""
    put(store, path="/v1/tasks", status=201, minutes=0)
    put(store, path="/keys/abc/revoke", status=303, minutes=1)
    put(store, path="/v1/keys/abc", method="DELETE", status=404, key_id="k2", minutes=2)
    put(store, path="/v1/tenants/acme", method="PATCH", status=422, minutes=3)
    put(store, path="/v1/tasks/default:t_1/cancel", status=403, key_id="k2", minutes=4)
    put(store, path="/login", status=303, minutes=5)
    return store


def paths(store: Store, **filters: object) -> list[str]:
    return [e.path for e in store.audit.list(**filters)]  # type: ignore[arg-type]


def test_by_method_and_by_a_path_holding_some_text_in_any_case(logged: Store) -> None:
    assert paths(logged, method="PATCH") == ["/v1/tenants/acme"]
    assert paths(logged, method="DELETE", key_id="k1") == []
    assert paths(logged, path_contains="KEYS") == ["/v1/keys/abc", "/keys/abc/revoke"]
    assert paths(logged, path_contains="revoke", method="POST") == ["/keys/abc/revoke"]


def test_like_wildcards_in_the_path_text_are_only_text(logged: Store) -> None:
    assert paths(logged, path_contains="%") == []
    assert paths(logged, path_contains="t_1") == ["/v1/tasks/default:t_1/cancel"]
    assert paths(logged, path_contains="s_") == []  # "_" is no wildcard: no path has "s_"


def test_by_status_done_refused_or_one_code(logged: Store) -> None:
    assert paths(logged, status="done") == ["/login", "/keys/abc/revoke", "/v1/tasks"]
    assert paths(logged, status="refused") == ["/v1/tasks/default:t_1/cancel", "/v1/tenants/acme", "/v1/keys/abc"]
    assert paths(logged, status=303) == ["/login", "/keys/abc/revoke"]
    assert paths(logged, status="refused", key_id="k2") == ["/v1/tasks/default:t_1/cancel", "/v1/keys/abc"]


def test_a_time_window_takes_in_since_and_leaves_out_until(logged: Store) -> None:
    at = [T0 + timedelta(minutes=m) for m in range(6)]
    assert paths(logged, since=at[4]) == ["/login", "/v1/tasks/default:t_1/cancel"]
    assert paths(logged, until=at[1]) == ["/v1/tasks"]
    assert paths(logged, since=at[1], until=at[3]) == ["/v1/keys/abc", "/keys/abc/revoke"]
    assert paths(logged, since=at[1], until=at[3], status="refused") == ["/v1/keys/abc"]
    assert paths(logged, since=at[5] + timedelta(seconds=1)) == []
    # A window given in another zone means the same instants.
    plus_two = timezone(timedelta(hours=2))
    assert paths(logged, since=at[4].astimezone(plus_two)) == ["/login", "/v1/tasks/default:t_1/cancel"]


def test_paging_keeps_the_filters(logged: Store) -> None:
    assert paths(logged, status="refused", limit=2) == ["/v1/tasks/default:t_1/cancel", "/v1/tenants/acme"]
    assert paths(logged, status="refused", limit=2, offset=2) == ["/v1/keys/abc"]


def test_roles_read_as_their_value_whoever_wrote_them(store: Store) -> None:
    store.audit.record(key_id="k1", role=Role.operator, tenant=None, method="POST", path="/a", target=None, status=200)
    put(store, path="/b", role="Role.admin")  # as str(Role.admin) writes it
    put(store, path="/c", role=None, key_id=None)
    with store.engine.connect() as connection:
        stored = [r[0] for r in connection.execute(text("SELECT role FROM audit_log ORDER BY id"))]
    assert stored == ["operator", "Role.admin", None]
    entries = store.audit.list()
    assert [(e.path, e.role) for e in entries] == [("/c", None), ("/b", Role.admin), ("/a", Role.operator)]
    assert entries[1].role is not None and entries[1].role.value == "admin"


@pytest.mark.parametrize(
    ("given", "plain"), [(Role.admin, "admin"), ("Role.viewer", "viewer"), ("agent", "agent"), (None, None)]
)
def test_plain_role(given: Role | str | None, plain: str | None) -> None:
    assert plain_role(given) == plain
