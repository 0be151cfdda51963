"""Opening the database: folders created, SQLite tuned for several processes, safe to repeat."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import inspect

from orchestrator.store import Store, open_database


def test_open_creates_the_folder_and_tables_and_can_be_repeated(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'nested' / 'dir' / 'berth.db'}"
    first = open_database(url)
    second = open_database(url)
    assert (tmp_path / "nested" / "dir" / "berth.db").exists()
    tables = set(inspect(second).get_table_names())
    assert {"tasks", "agents", "checkpoints", "token_ledger", "task_events"} <= tables
    with first.connect() as conn:
        pragma = {name: conn.exec_driver_sql(f"PRAGMA {name}").scalar() for name in
                  ("journal_mode", "busy_timeout", "synchronous", "foreign_keys")}  # fmt: skip
    assert pragma == {"journal_mode": "wal", "busy_timeout": 10000, "synchronous": 1, "foreign_keys": 1}
    first.dispose()
    second.dispose()


def test_an_in_memory_database_is_shared_by_the_stores_of_one_engine() -> None:
    store = Store.open("sqlite://")
    store.events.append("t", "state", {})
    assert len(store.events.read("t")) == 1
    store.close()


def test_a_database_from_an_earlier_version_gains_new_columns(tmp_path) -> None:

    from orchestrator.store import Store
    from sdk.wire.ledger import LedgerEntry

    db = _old_ledger(tmp_path / "old.db", rows=1)

    store = Store.open(f"sqlite:///{db}")
    assert store.ledger.record(LedgerEntry("new", 1, 1, "m", 3, 4, 0.0, 0.0, 0.0, "x", response_id="r1"))
    assert [e.response_id for e in store.ledger.entries("old")] == [""]
    assert [e.response_id for e in store.ledger.entries("new")] == ["r1"]
    Store.open(f"sqlite:///{db}")  # opening again changes nothing


def test_an_old_ledger_with_repeated_keys_is_refused_by_name_not_trimmed(tmp_path) -> None:
    import sqlite3

    import pytest

    from orchestrator.store import Store

    db = _old_ledger(tmp_path / "old.db", rows=2)  # the same key twice

    with pytest.raises(RuntimeError, match=r"token_ledger .*\(task_id, step, attempt, kind\)"):
        Store.open(f"sqlite:///{db}")
    con = sqlite3.connect(db)
    assert con.execute("SELECT count(*) FROM token_ledger").fetchone() == (2,)  # nothing lost


def _old_ledger(db, rows: int):
    """A database from before migrations: its ledger without today's columns or its unique key, with `rows`
    entries of one key."""
    import sqlite3

    con = sqlite3.connect(db)
    con.execute(
        "CREATE TABLE token_ledger (id INTEGER PRIMARY KEY, task_id VARCHAR NOT NULL, step INTEGER NOT NULL,"
        " attempt INTEGER NOT NULL, kind VARCHAR NOT NULL, model VARCHAR NOT NULL, prompt_tokens INTEGER NOT"
        " NULL, completion_tokens INTEGER NOT NULL, cost_usd FLOAT NOT NULL, ttft_s FLOAT NOT NULL, duration_s"
        " FLOAT NOT NULL, served_by VARCHAR NOT NULL, created_at DATETIME)"
    )
    for _ in range(rows):
        con.execute(
            "INSERT INTO token_ledger (task_id, step, attempt, kind, model, prompt_tokens, completion_tokens,"
            " cost_usd, ttft_s, duration_s, served_by) VALUES ('old', 1, 1, 'settled', 'm', 1, 2, 0, 0, 0, 'x')"
        )
    con.commit()
    con.close()
    return db
