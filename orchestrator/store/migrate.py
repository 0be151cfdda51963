"""Bringing a database's schema to this version at start-up: Alembic's revisions in `migrations/`.

Every process that opens the store migrates (`berth up`, the API server, the worker, each
control-plane replica), so two may start together: on PostgreSQL they take one advisory lock and
the second finds the work done; on SQLite, whose file lock Alembic's DDL cannot hold across
statements, a loser whose CREATE collides retries and finds the schema current. Within one process
migrations take turns: Alembic keeps its migration context in module-wide proxies.

A database made before Berth had migrations (tables, no `alembic_version`) is adopted: its
missing tables and columns are added as the old start-up did, and it is stamped at the newest
revision. That is right while revisions only add tables and columns (0002 changes types on
PostgreSQL alone, which Berth did not support before migrations); the first revision that changes
or drops something must make adoption stamp the revision before it and upgrade from there.
"""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import ColumnDefault, Connection, Engine, UniqueConstraint, inspect, text
from sqlalchemy.exc import DatabaseError, IntegrityError
from sqlmodel import SQLModel

from . import tables  # noqa: F401  (registers the tables on SQLModel.metadata)

MIGRATIONS = Path(__file__).resolve().parent / "migrations"
# pg_advisory_xact_lock key: "berth-migrate" folded to a bigint, the same in every process.
_PG_LOCK_KEY = 0x62657274686D6967
_SQLITE_ATTEMPTS = 10
# Alembic's `context` and `op` are module-wide proxies: one migration at a time per process.
_in_process = threading.Lock()


def alembic_config(connection: Connection | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None, "the migrations folder has no revision"
    return head


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def migrate(engine: Engine) -> None:
    """Upgrade the database to the newest revision; a no-op when it is there already."""
    with _in_process:
        _migrate(engine)


def _migrate(engine: Engine) -> None:
    if engine.dialect.name == "postgresql":
        with engine.begin() as conn:
            conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_LOCK_KEY})
            _upgrade(conn)
        return
    for attempt in range(1, _SQLITE_ATTEMPTS + 1):
        try:
            with engine.begin() as conn:
                _upgrade(conn)
            return
        except DatabaseError:
            if attempt == _SQLITE_ATTEMPTS:
                raise
            # Apart, so that the winner's stamp lands before the next look: on a busy machine three back-to-back
            # tries all collided with a winner still creating its tables.
            time.sleep(random.uniform(0.5, 1.5) * min(0.1 * attempt, 1.0))


def _upgrade(conn: Connection) -> None:
    config = alembic_config(conn)
    if MigrationContext.configure(conn).get_current_revision() is None and _has_berth_tables(conn):
        _adopt(conn)
        command.stamp(config, "head")
        return
    command.upgrade(config, "head")


def _has_berth_tables(conn: Connection) -> bool:
    found = set(inspect(conn).get_table_names())
    return any(table in found for table in SQLModel.metadata.tables)


def _adopt(conn: Connection) -> None:
    """A pre-migration database: the tables, defaulted columns and unique keys the models have and it lacks."""
    SQLModel.metadata.create_all(conn)
    found = inspect(conn)
    for table in SQLModel.metadata.sorted_tables:
        present = {c["name"] for c in found.get_columns(table.name)}
        for column in table.columns:
            if column.name in present:
                continue
            kind = column.type.compile(dialect=conn.dialect)
            # A plain value (ColumnDefault's scalar kind); a callable's or a SQL expression's has no DDL default.
            default = (
                column.default.arg if isinstance(column.default, ColumnDefault) and column.default.is_scalar else None
            )
            clause = (
                f" DEFAULT '{default}'"
                if isinstance(default, str)
                else (f" DEFAULT {default}" if isinstance(default, (int, float)) else "")
            )
            conn.execute(text(f'ALTER TABLE "{table.name}" ADD COLUMN "{column.name}" {kind}{clause}'))
    _add_missing_unique_keys(conn)


def _add_missing_unique_keys(conn: Connection) -> None:
    """Each unique key the models declare and an old table lacks, added as a unique index of the same name.

    The store's writes lean on these keys (the ledger's ON CONFLICT DO NOTHING names its key), so a
    table without one would fail its first write. Rows that already break a key are not deleted to
    make room: the adoption stops and names the table and the columns, for an operator to settle.
    """
    found = inspect(conn)
    for table in SQLModel.metadata.sorted_tables:
        # An index's column is None where it indexes an expression: such an index is no key of ours.
        present: set[tuple[str | None, ...]] = {
            tuple(u["column_names"]) for u in found.get_unique_constraints(table.name)
        }
        present |= {tuple(i["column_names"]) for i in found.get_indexes(table.name) if i.get("unique")}
        for key in (c for c in table.constraints if isinstance(c, UniqueConstraint)):
            columns = tuple(c.name for c in key.columns)
            if columns in present:
                continue
            quoted = ", ".join(f'"{name}"' for name in columns)
            try:
                with conn.begin_nested():
                    conn.execute(text(f'CREATE UNIQUE INDEX "{key.name}" ON "{table.name}" ({quoted})'))
            except IntegrityError as exc:
                raise RuntimeError(
                    f"cannot adopt this database: table {table.name} has rows that repeat the key"
                    f" ({', '.join(columns)}) this version requires to be unique; remove the repeats and start again"
                ) from exc
