"""Schema migrations at start-up: a new database is at the newest revision and matches the models; one
made before migrations is adopted with its rows; processes starting together migrate once."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, text
from sqlmodel import SQLModel

from orchestrator.store import Store, open_database
from orchestrator.store.migrate import current_revision, head_revision
from sdk import Spend, TaskState, TaskStatus

pytestmark = pytest.mark.postgresql  # migrations run on both databases Berth supports


def _emptied(db_url: str) -> str:
    """The database without any table (a PostgreSQL test database is cloned from a migrated template)."""
    engine = create_engine(db_url)
    SQLModel.metadata.drop_all(engine)
    with engine.begin() as conn:
        conn.execute(text("DROP TABLE IF EXISTS alembic_version"))
    engine.dispose()
    return db_url


def _schema_differences(engine) -> list:  # noqa: ANN001
    with engine.connect() as conn:
        return compare_metadata(MigrationContext.configure(conn), SQLModel.metadata)


def test_a_new_database_is_at_the_newest_revision_and_its_schema_is_the_models(db_url: str) -> None:
    """Fails when a model changes without a revision that makes the same change (write one: see migrations/)."""
    engine = open_database(_emptied(db_url))
    assert current_revision(engine) == head_revision()
    assert _schema_differences(engine) == []
    engine.dispose()


def test_a_database_from_before_migrations_is_adopted_with_its_rows(db_url: str) -> None:
    old = create_engine(_emptied(db_url))
    SQLModel.metadata.create_all(old)  # what Berth's start-up did before it had migrations
    state = TaskState(
        task_id="t-old",
        agent="a",
        agent_version="1",
        model="m",
        tenant="default",
        status=TaskStatus.running,
        max_steps=3,
        spend=Spend(token_limit=100),
    )
    Store.from_engine(old).tasks.create("t-old", "{}", state)  # from_engine migrates nothing
    with old.begin() as conn:
        conn.execute(text("DROP TABLE ui_sessions"))  # a table that version did not have yet
    old.dispose()

    store = Store.open(db_url)
    assert current_revision(store.engine) == head_revision()
    assert _schema_differences(store.engine) == []
    record = store.tasks.get("t-old")
    assert record is not None and record.state.spend.token_limit == 100
    store.close()


def test_processes_starting_together_on_a_new_database_migrate_it_once(db_url: str) -> None:
    """Control-plane replicas (processes) and the threads of one process all open the store at start-up."""
    _emptied(db_url)
    code = "import sys; from orchestrator.store import open_database; open_database(sys.argv[1]).dispose()"
    processes = [
        subprocess.Popen([sys.executable, "-c", code, db_url], stderr=subprocess.PIPE, text=True) for _ in range(3)
    ]
    errors: list[BaseException] = []
    engines = []

    def start() -> None:
        try:
            engines.append(open_database(db_url))
        except BaseException as exc:  # noqa: BLE001 (asserted below)
            errors.append(exc)

    threads = [threading.Thread(target=start) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    for p in processes:
        _out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
    assert {current_revision(e) for e in engines} == {head_revision()}
    with engines[0].connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM alembic_version")).scalar() == 1
    assert _schema_differences(engines[0]) == []
    for e in engines:
        e.dispose()
