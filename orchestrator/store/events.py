"""A task's event stream (steps, LLM calls, tool calls, state changes), in write order.

`seq` is one global counter, so a follower (the SSE stream, `berth tasks show --follow`)
resumes with "everything after the last seq I saw" and never sees an event twice.
"""

from __future__ import annotations

import json

import pydantic_core
from sqlalchemy import Engine
from sqlmodel import Session, col, select

from sdk import TaskEvent

from .tables import EventRow

MAX_READ = 5000


class SqlEventLog:
    """activities.ports.EventLog on the control-plane database."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def append(self, task_id: str, kind: str, data: dict) -> int:
        """Add one event; returns its seq. Datetimes, enums and models in `data` are stored as JSON."""
        row = EventRow(task_id=task_id, kind=kind, data_json=json.dumps(data, default=pydantic_core.to_jsonable_python))
        with Session(self._engine, expire_on_commit=False) as session:
            session.add(row)
            session.commit()
        assert row.seq is not None
        return row.seq

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
        return [
            TaskEvent(seq=r.seq or 0, task_id=r.task_id, kind=r.kind, at=r.at, data=json.loads(r.data_json)) for r in rows
        ]
