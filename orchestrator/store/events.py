"""A task's event stream (steps, LLM calls, tool calls, state changes), in write order.

`seq` is one global counter, so a follower (the SSE stream, `berth tasks show --follow`)
resumes with "everything after the last seq I saw" and never sees an event twice.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from datetime import datetime

import pydantic_core
import sqlalchemy as sa
from sqlalchemy import Engine, func, text
from sqlmodel import Session, col, select

from sdk import TaskEvent

from .connections import connected
from .tables import EventRow, TaskRow, table_of, utcnow

MAX_READ = 5000
# pg_advisory_xact_lock's first key: the class of lock (this one: "a task's event appends"), so
# that the per-task second key cannot meet another use of advisory locks.
_PG_APPEND_LOCK_CLASS = 0x65766E74  # "evnt"
# An hour of a busy fleet's step and interruption events is a few thousand; past this the overview
# counts "at least", rather than reading without end.
RECENT_CAP = 50_000


# Every settled call, step and state change appends one, so the statements are built once.
_EVENTS = table_of(EventRow)
_APPEND = sa.insert(_EVENTS).returning(_EVENTS.c.seq)
_PG_APPEND_LOCK = text("SELECT pg_advisory_xact_lock(:lock_class, hashtext(:task_id))")


class SqlEventLog:
    """activities.step.ports.EventLog on the control-plane database."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def append(self, task_id: str, kind: str, data: dict) -> int:
        """Add one event; returns its seq. Datetimes, enums and models in `data` are stored as JSON."""
        data_json = json.dumps(data, default=pydantic_core.to_jsonable_python)
        with connected(self._engine) as connection:
            if connection.dialect.name == "postgresql":
                # PostgreSQL draws seq at INSERT but shows the row at COMMIT: two writers of one task can
                # commit out of seq order, and a follower that already read past the later seq would
                # never see the earlier one. One append per task at a time, as SQLite's single writer
                # gives for free; appends of different tasks still run side by side.
                connection.execute(_PG_APPEND_LOCK, {"lock_class": _PG_APPEND_LOCK_CLASS, "task_id": task_id})
            return connection.execute(
                _APPEND, {"task_id": task_id, "kind": kind, "at": utcnow(), "data_json": data_json}
            ).scalar_one()

    def of_kind(self, task_id: str, kind: str, limit: int = 500) -> list[TaskEvent]:
        """The task's events of one kind (e.g. its interruptions), oldest first."""
        with Session(self._engine) as session:
            rows = session.exec(
                select(EventRow)
                .where(EventRow.task_id == task_id, EventRow.kind == kind)
                .order_by(col(EventRow.seq))
                .limit(max(0, min(limit, MAX_READ)))
            ).all()
        return [_event(r) for r in rows]

    def read(self, task_id: str, after_seq: int = 0, limit: int = 500) -> list[TaskEvent]:
        """Events of `task_id` with seq > after_seq, oldest first, at most `limit` (capped at MAX_READ)."""
        limit = max(0, min(limit, MAX_READ))
        with Session(self._engine) as session:
            rows = session.exec(
                select(EventRow)
                .where(EventRow.task_id == task_id, col(EventRow.seq) > after_seq)
                .order_by(col(EventRow.seq))
                .limit(limit)
            ).all()
        return [_event(r) for r in rows]

    def last_seq(self, task_id: str) -> int:
        """The seq of the task's latest event (0 if none): where a follower that has seen the rest starts."""
        with Session(self._engine) as session:
            found = session.exec(select(func.max(EventRow.seq)).where(EventRow.task_id == task_id)).first()
        return found or 0

    def newest_seq(self) -> int:
        """The seq of the newest event of any task (0 if none): a cheap sign that something happened since."""
        with Session(self._engine) as session:
            found = session.exec(select(func.max(EventRow.seq))).first()
        return found or 0

    def recent(
        self, kinds: Collection[str], since: datetime, tenant: str | None = None, limit: int = RECENT_CAP
    ) -> list[TaskEvent]:
        """Events of `kinds` (of every task, or of one tenant's) at or after `since`, oldest first: the newest `limit`
        of them when there are more (a chart of a busy day misses its first hours, never its last minutes)."""
        statement = select(EventRow).where(col(EventRow.kind).in_(list(kinds)), col(EventRow.at) >= since)
        if tenant is not None:
            statement = statement.join(TaskRow, col(TaskRow.task_id) == col(EventRow.task_id)).where(
                TaskRow.tenant == tenant
            )
        with Session(self._engine) as session:
            rows = session.exec(statement.order_by(col(EventRow.seq).desc()).limit(limit)).all()
        return [_event(r) for r in reversed(rows)]


def _event(row: EventRow) -> TaskEvent:
    return TaskEvent(seq=row.seq or 0, task_id=row.task_id, kind=row.kind, at=row.at, data=json.loads(row.data_json))
