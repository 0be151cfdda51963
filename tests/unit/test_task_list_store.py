"""The task registry's reads the Tasks page sorts and filters with: a creation-time window, and the order by
creation or by last update, either way, the same on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from sqlalchemy import update

from orchestrator.store import Store
from orchestrator.store.tables import TaskRow
from sdk import Spend, TaskState, TaskStatus

pytestmark = pytest.mark.postgresql  # the store's SQL must mean the same on SQLite and PostgreSQL

BASE = datetime(2030, 5, 1, 12, 0, tzinfo=UTC)


def _state(task_id: str, updated_at: datetime, tenant: str = "acme") -> TaskState:
    return TaskState(
        task_id=task_id,
        agent="writer",
        agent_version="v1",
        model="m",
        tenant=tenant,
        status=TaskStatus.running,
        max_steps=5,
        spend=Spend(token_limit=100),
        updated_at=updated_at,
    )


def _created(
    store: Store, task_id: str, at: datetime, *, updated_at: datetime | None = None, tenant: str = "acme"
) -> None:
    """A task whose row was made at `at` (the clock of a create cannot be set, so its column is put back)."""
    store.tasks.create(task_id, "{}", _state(task_id, updated_at or at, tenant))
    with store.engine.begin() as connection:
        connection.execute(update(TaskRow).where(TaskRow.task_id == task_id).values(created_at=at))


@pytest.fixture
def five(store: Store) -> Store:
    """t0 … t4, made a minute apart from BASE; updated in another order: t2 last, then t0, t4, t1, t3."""
    updated = {"t0": 40, "t1": 20, "t2": 50, "t3": 10, "t4": 30}
    for i in range(5):
        later = BASE + timedelta(hours=1, minutes=updated[f"t{i}"])
        _created(store, f"t{i}", BASE + timedelta(minutes=i), updated_at=later, tenant="beta" if i == 4 else "acme")
    return store


def ids(store: Store, **filters: object) -> list[str]:
    return [t.task_id for t in store.tasks.list(**filters)]


def test_the_creation_window_includes_its_start_and_excludes_its_end(five: Store) -> None:
    assert ids(five, created_after=BASE + timedelta(minutes=1)) == ["t4", "t3", "t2", "t1"]
    assert ids(five, created_before=BASE + timedelta(minutes=3)) == ["t2", "t1", "t0"]
    assert ids(five, created_after=BASE + timedelta(minutes=1), created_before=BASE + timedelta(minutes=3)) == [
        "t2",
        "t1",
    ]
    # Adjacent windows count each task once.
    middle = BASE + timedelta(minutes=2)
    assert ids(five, created_before=middle) + ids(five, created_after=middle) == ["t1", "t0", "t4", "t3", "t2"]
    assert ids(five, created_after=BASE + timedelta(days=1)) == []


def test_the_window_is_in_utc_whatever_zone_the_bound_is_given_in(five: Store) -> None:
    paris = timezone(timedelta(hours=2))
    assert ids(five, created_after=(BASE + timedelta(minutes=3)).astimezone(paris)) == ["t4", "t3"]


def test_the_window_combines_with_the_other_filters_and_pages(five: Store) -> None:
    after = BASE + timedelta(minutes=1)
    assert ids(five, tenant="acme", created_after=after) == ["t3", "t2", "t1"]
    assert ids(five, tenant="acme", created_after=after, limit=2, offset=1) == ["t2", "t1"]


def test_the_list_orders_by_creation_or_last_update_either_way(five: Store) -> None:
    assert ids(five) == ["t4", "t3", "t2", "t1", "t0"]  # the default every caller had stays
    assert ids(five, ascending=True) == ["t0", "t1", "t2", "t3", "t4"]
    assert ids(five, order_by="updated") == ["t2", "t0", "t4", "t1", "t3"]
    assert ids(five, order_by="updated", ascending=True) == ["t3", "t1", "t4", "t0", "t2"]
    assert ids(five, order_by="updated", limit=2, offset=1) == ["t0", "t4"]
    with pytest.raises(ValueError, match="order_by"):
        five.tasks.list(order_by="tokens")  # type: ignore[arg-type]


def test_tasks_made_in_the_same_instant_keep_one_order(store: Store) -> None:
    for task_id in ("b", "a", "c"):
        _created(store, task_id, BASE)
    assert ids(store) == ["c", "b", "a"]
    assert ids(store, ascending=True) == ["a", "b", "c"]
