"""The store reads the admin UI added: sessions, status counts, tokens per minute, recent events, filters."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from orchestrator.store import Store
from orchestrator.store.sessions import SESSION_LIFETIME
from sdk import Spend, TaskState, TaskStatus
from sdk.wire.identity import Role
from sdk.wire.ledger import SETTLED, LedgerEntry

pytestmark = pytest.mark.postgresql  # the store's SQL must mean the same on SQLite and PostgreSQL


def _task(
    store: Store, task_id: str, *, tenant: str = "default", model: str = "m-1", status: TaskStatus = TaskStatus.running
) -> TaskState:
    state = TaskState(
        task_id=task_id,
        agent="a",
        agent_version="v",
        model=model,
        tenant=tenant,
        status=status,
        max_steps=5,
        spend=Spend(token_limit=100),
    )
    store.tasks.create(task_id, "{}", state)
    return state


def test_a_session_is_stored_hashed_and_lives_while_its_key_does(store: Store) -> None:
    key = store.keys.create(Role.operator, "default", name="ops")
    started = store.ui_sessions.start(key.key_id, Role.operator, "default")
    with store.engine.connect() as connection:
        rows = connection.exec_driver_sql("SELECT * FROM ui_sessions").fetchall()
    assert len(rows) == 1 and started.cookie not in repr(rows)
    found = store.ui_sessions.resolve(started.cookie)
    assert found is not None and (found.key_id, found.role, found.tenant) == (key.key_id, Role.operator, "default")
    assert store.ui_sessions.resolve(started.cookie + "x") is None
    later = datetime.now(UTC) + SESSION_LIFETIME + timedelta(seconds=1)
    assert store.ui_sessions.resolve(started.cookie, now=later) is None
    store.keys.revoke(key.key_id)
    assert store.ui_sessions.resolve(started.cookie) is None


def test_signing_in_sweeps_expired_sessions_and_signing_out_ends_one(store: Store) -> None:
    key = store.keys.create(Role.viewer)
    old = store.ui_sessions.start(key.key_id, Role.viewer, None, now=datetime.now(UTC) - SESSION_LIFETIME * 2)
    new = store.ui_sessions.start(key.key_id, Role.viewer, None)
    with store.engine.connect() as connection:
        assert connection.exec_driver_sql("SELECT COUNT(*) FROM ui_sessions").scalar() == 1
    assert store.ui_sessions.resolve(old.cookie) is None
    store.ui_sessions.end(new.cookie)
    assert store.ui_sessions.resolve(new.cookie) is None


def test_tasks_filter_by_model_and_id_prefix_and_count_by_status(store: Store) -> None:
    _task(store, "alpha_1", model="m-1")
    _task(store, "alpha%2", model="m-2", status=TaskStatus.completed)
    _task(store, "beta-1", model="m-1", tenant="acme")
    assert [t.task_id for t in store.tasks.list(model="m-1")] == ["beta-1", "alpha_1"]
    assert [t.task_id for t in store.tasks.list(id_prefix="alpha_")] == ["alpha_1"]  # `_` is no wildcard
    assert [t.task_id for t in store.tasks.list(id_prefix="alpha%")] == ["alpha%2"]
    assert store.tasks.count_by_status() == {"running": 2, "completed": 1}
    assert store.tasks.count_by_status("acme") == {"running": 1}


def test_tokens_per_minute_buckets_the_last_hour_by_tenant(store: Store) -> None:
    _task(store, "t-default")
    _task(store, "t-acme", tenant="acme")
    for task_id, tokens in (("t-default", 30), ("t-acme", 7)):
        store.ledger.record(
            LedgerEntry(
                task_id=task_id,
                step=1,
                attempt=1,
                model="m-1",
                prompt_tokens=tokens,
                completion_tokens=tokens,
                cost_usd=0.0,
                ttft_s=0.1,
                duration_s=1.0,
                served_by="n1/r1",
                kind=SETTLED,
            )
        )
    since = datetime.now(UTC) - timedelta(hours=1)
    everyone = store.ledger.tokens_per_minute(since)
    assert len(everyone) in (61, 62) and sum(n for _, n in everyone) == 74 and everyone[-1][1] == 74
    assert sum(n for _, n in store.ledger.tokens_per_minute(since, "acme")) == 14
    assert set(store.ledger.last_served(["n1/r1", "n2/r9"])) == {"n1/r1"}


def test_recent_events_and_the_last_seq(store: Store) -> None:
    _task(store, "t-default")
    _task(store, "t-acme", tenant="acme")
    store.events.append("t-default", "llm_call", {"tier": "disk"})
    store.events.append("t-acme", "interruption", {"kind": "notice"})
    last = store.events.append("t-acme", "step", {"step": 1})
    since = datetime.now(UTC) - timedelta(minutes=5)
    assert [e.kind for e in store.events.recent(("llm_call", "interruption"), since)] == ["llm_call", "interruption"]
    assert [e.task_id for e in store.events.recent(("llm_call", "interruption"), since, "acme")] == ["t-acme"]
    assert store.events.recent(("llm_call",), datetime.now(UTC) + timedelta(minutes=1)) == []
    # Past its limit it keeps the newest, still oldest first: a busy day's chart misses its start, not its end.
    store.events.append("t-default", "llm_call", {"tier": "warm"})
    assert [e.data["tier"] for e in store.events.recent(("llm_call",), since, limit=1)] == ["warm"]
    assert [e.kind for e in store.events.recent(("llm_call", "interruption"), since, limit=2)] == [
        "interruption",
        "llm_call",
    ]
    assert store.events.last_seq("t-acme") == last and store.events.last_seq("none") == 0
