"""Opening the control-plane database: one engine per process, its schema migrated on first use.

The embedded default is one SQLite file that several processes (API server, worker) open
at once. WAL lets readers run beside the single writer; `busy_timeout` makes a writer wait
for the lock instead of failing at once; `synchronous=NORMAL` is durable across process
crashes in WAL mode (only an OS crash may lose the last commits), at a fraction of FULL's
fsync cost. Every store method keeps its transaction to one or two statements, so the
write lock is held for milliseconds.

Any other SQLAlchemy URL (PostgreSQL at scale) gets a plain engine with the same tables. Either way
the schema is brought to this version by Alembic's revisions (migrate.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.pool import StaticPool

from .migrate import migrate

SQLITE_BUSY_TIMEOUT_S = 10.0


def open_database(url: str) -> Engine:
    """An engine for `url` with Berth's schema migrated to this version; safe to call again, and from
    several processes at once."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        engine = _sqlite_engine(parsed)
    else:
        # pre_ping: a PostgreSQL connection idle in the pool may have been closed by the server.
        engine = create_engine(parsed, pool_pre_ping=True)
    migrate(engine)
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
