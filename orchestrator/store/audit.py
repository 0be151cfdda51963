"""The audit log: one row per state-changing API request, appended and never edited.

Rows are written by one middleware (orchestrator/api/audit.py) after the answer is known, so
a refused request is logged with its 401, 403 or 422 as faithfully as an accepted one.
"""

from __future__ import annotations

import builtins

from sqlalchemy import Engine
from sqlmodel import Session, col, select

from sdk._identity import AuditEntry

from .tables import AuditRow


class SqlAuditLog:
    """The audit log on the control-plane database."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def record(self, *, key_id: str | None, role: str | None, tenant: str | None, method: str, path: str,
               target: str | None, status: int) -> None:
        with Session(self._engine) as session:
            session.add(AuditRow(key_id=key_id, role=role, tenant=tenant, method=method, path=path, target=target,
                                 status=status))
            session.commit()

    def list(self, *, key_id: str | None = None, limit: int = 100, offset: int = 0) -> builtins.list[AuditEntry]:
        """Newest first; only one key's requests when `key_id` is given."""
        statement = select(AuditRow)
        if key_id is not None:
            statement = statement.where(col(AuditRow.key_id) == key_id)
        statement = statement.order_by(col(AuditRow.id).desc()).limit(limit).offset(offset)
        with Session(self._engine) as session:
            return [AuditEntry.model_validate(r.model_dump()) for r in session.exec(statement)]
