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
