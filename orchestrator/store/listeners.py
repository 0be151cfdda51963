"""Who was there to hear the nodes' heartbeats, so a silence is blamed on the right party.

Nodes heartbeat to the control-plane API; the pool that marks silent nodes lost runs in the worker. While
the API is down (a restart, a crash) every node falls silent at once, and a pool judging by the clock
alone would mark the whole fleet lost and take every lease from under steps whose replies were already
on their way. So each API process beats here (`beat`), and a node's silence counts only over a span some
listener was demonstrably up for: from when it started listening to its last beat.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import Engine, delete
from sqlmodel import Session, col, select

from .tables import HeartbeatListenerRow, utcnow

FORGET_AFTER = timedelta(hours=1)  # a listener gone this long says nothing any other row does not


class SqlHeartbeatListeners:
    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def beat(self, listener_id: str, since: datetime, now: datetime | None = None) -> None:
        """Record that `listener_id`, listening since `since`, is alive now; forget long-gone listeners."""
        now = now or utcnow()
        with Session(self._engine) as session:
            row = session.get(HeartbeatListenerRow, listener_id)
            if row is None:
                row = HeartbeatListenerRow(listener_id=listener_id, since=since, alive_at=now)
            row.since, row.alive_at = since, now
            session.add(row)
            session.execute(delete(HeartbeatListenerRow).where(col(HeartbeatListenerRow.alive_at) < now - FORGET_AFTER))
            session.commit()


def silence_cutoff(session: Session, seconds: float, now: datetime) -> datetime | None:
    """The latest moment such that a node last heard before it has been silent for `seconds` while a
    listener was up; None while no listener has been up that long (nobody can tell a silent node yet).

    With no listener on record at all (a store driven directly, without an API) the clock alone decides.
    """
    span = timedelta(seconds=seconds)
    listeners = session.exec(select(HeartbeatListenerRow)).all()
    if not listeners:
        return now - span
    heard = [min(row.alive_at, now) - span for row in listeners if min(row.alive_at, now) - span >= row.since]
    return max(heard, default=None)
