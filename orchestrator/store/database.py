"""Opening the control-plane database: one engine per process, tables created on first use.

The embedded default is one SQLite file that several processes (API server, worker) open
at once. WAL lets readers run beside the single writer; `busy_timeout` makes a writer wait
for the lock instead of failing at once; `synchronous=NORMAL` is durable across process
crashes in WAL mode (only an OS crash may lose the last commits), at a fraction of FULL's
fsync cost. Every store method keeps its transaction to one or two statements, so the
write lock is held for milliseconds.

Any other SQLAlchemy URL (PostgreSQL at scale) gets a plain engine with the same tables.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, inspect, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import DatabaseError
from sqlalchemy.pool import StaticPool
from sqlmodel import SQLModel

from . import tables  # noqa: F401  (registers the tables on SQLModel.metadata)

SQLITE_BUSY_TIMEOUT_S = 10.0
# Two processes starting together on a fresh database can both see a table missing and
# both create it; the loser's CREATE fails. A second pass finds the tables and is a no-op.
_CREATE_ATTEMPTS = 3


def open_database(url: str) -> Engine:
    """An engine for `url` with Berth's tables created; safe to call again on the same database."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        engine = _sqlite_engine(parsed)
    else:
        # pre_ping: a PostgreSQL connection idle in the pool may have been closed by the server.
        engine = create_engine(parsed, pool_pre_ping=True)
    _create_tables(engine)
    return engine


def _is_memory(url: URL) -> bool:
    database = url.database or ""
    return database in ("", ":memory:") or url.query.get("mode") == "memory"


def _sqlite_engine(url: URL) -> Engine:
    memory = _is_memory(url)
    if not memory and url.database and not url.database.startswith("file:"):
        Path(url.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
    kwargs: dict[str, Any] = {
        # Activities and FastAPI's thread pool use one engine from many threads; the pool hands
        # each connection to one thread at a time, so sqlite3's own thread check is redundant.
        "connect_args": {"check_same_thread": False, "timeout": SQLITE_BUSY_TIMEOUT_S},
    }
    if memory:
        kwargs["poolclass"] = StaticPool  # an in-memory database lives in one connection: share it
    engine = create_engine(url, **kwargs)

    @event.listens_for(engine, "connect")
    def _configure(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(f"PRAGMA busy_timeout = {int(SQLITE_BUSY_TIMEOUT_S * 1000)}")
            if not memory:
                cursor.execute("PRAGMA journal_mode = WAL")
            cursor.execute("PRAGMA synchronous = NORMAL")
            cursor.execute("PRAGMA foreign_keys = ON")
        finally:
            cursor.close()

    return engine


def _create_tables(engine: Engine) -> None:
    for attempt in range(1, _CREATE_ATTEMPTS + 1):
        try:
            SQLModel.metadata.create_all(engine)
            _add_missing_columns(engine)
            return
        except DatabaseError:
            if attempt == _CREATE_ATTEMPTS:
                raise


def _add_missing_columns(engine: Engine) -> None:
    """Columns added to a table since its database was created, added in place.

    create_all makes missing tables, never missing columns; a data dir from an earlier
    version must still open, since `berth up` resumes the tasks it holds. Only additive,
    defaulted columns are ever introduced, so ADD COLUMN is the whole migration.
    """
    found = inspect(engine)
    for table in SQLModel.metadata.sorted_tables:
        if not found.has_table(table.name):
            continue
        present = {c["name"] for c in found.get_columns(table.name)}
        for column in table.columns:
            if column.name in present:
                continue
            kind = column.type.compile(dialect=engine.dialect)
            default = column.default.arg if column.default is not None and column.default.is_scalar else None
            clause = f" DEFAULT '{default}'" if isinstance(default, str) else (
                f" DEFAULT {default}" if isinstance(default, (int, float)) else "")
            with engine.begin() as conn:
                conn.execute(text(f'ALTER TABLE "{table.name}" ADD COLUMN "{column.name}" {kind}{clause}'))
