"""Leadership of a job that one control-plane replica does at a time (the scaler): a row with a holder and
an expiry, taken over by one conditional UPDATE, so two replicas never both believe they lead.

The holder renews it well within its term; a holder that dies stops renewing and another replica takes
over once the term has run out. A lapse is harmless for the scaler: its next tick plans from the fleet.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import Engine, or_, update
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col

from .tables import LeadershipRow, utcnow


class SqlLeadership:
    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def hold(self, job: str, holder: str, term_s: float, now: datetime | None = None) -> bool:
        """Take or renew `job` for `holder` for `term_s`; True while `holder` leads it."""
        now = now or utcnow()
        until = now + timedelta(seconds=term_s)
        with Session(self._engine) as session:
            taken = session.exec(
                update(LeadershipRow)
                .where(
                    col(LeadershipRow.job) == job,
                    or_(col(LeadershipRow.holder) == holder, col(LeadershipRow.expires_at) < now),
                )
                .values(holder=holder, expires_at=until)
            )
            if taken.rowcount:
                session.commit()
                return True
            session.add(LeadershipRow(job=job, holder=holder, expires_at=until))
            try:
                session.commit()
                return True
            except IntegrityError:  # another replica holds it, or took it first
                session.rollback()
                return False

    def leader(self, job: str, now: datetime | None = None) -> str | None:
        with Session(self._engine) as session:
            row = session.get(LeadershipRow, job)
            return row.holder if row is not None and row.expires_at >= (now or utcnow()) else None
