"""The audit log: one row per state-changing API request, appended and never edited.

Rows are written by one middleware (orchestrator/api/audit.py) after the answer is known, so
a refused request is logged with its 401, 403 or 422 as faithfully as an accepted one.
"""

from __future__ import annotations

import builtins
from datetime import datetime
from enum import Enum
from typing import Any, Literal

from sqlalchemy import Engine, func
from sqlalchemy.sql.elements import ColumnElement
from sqlmodel import Session, col, select

from sdk.wire.identity import AuditEntry

from .tables import AuditRow

# "done": answered below 400 (the request did what it asked); "refused": 400 and above; or one exact code.
StatusFilter = Literal["done", "refused"] | int
REFUSED_FROM = 400
_ROLE_PREFIX = "Role."


def plain_role(role: str | Enum | None) -> str | None:
    """A role as its bare value ("admin"): a Role member, or text that `str(Role.admin)` once made "Role.admin",
    so that old rows and careless callers read the same as the middleware's own."""
    if role is None:
        return None
    if isinstance(role, Enum):
        return str(role.value)
    return role.removeprefix(_ROLE_PREFIX)


class SqlAuditLog:
    """The audit log on the control-plane database."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def record(
        self,
        *,
        key_id: str | None,
        role: str | Enum | None,
        tenant: str | None,
        method: str,
        path: str,
        target: str | None,
        status: int,
    ) -> None:
        with Session(self._engine) as session:
            session.add(
                AuditRow(
                    key_id=key_id,
                    role=plain_role(role),
                    tenant=tenant,
                    method=method,
                    path=path,
                    target=target,
                    status=status,
                )
            )
            session.commit()

    def list(
        self,
        *,
        key_id: str | None = None,
        method: str | None = None,
        path_contains: str | None = None,
        status: StatusFilter | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> builtins.list[AuditEntry]:
        """Newest first, narrowed by every filter given: one key's requests, one method, a path holding
        `path_contains` (any case), a status class or code, and a time window `since` <= at < `until`."""
        statement = select(AuditRow)
        for condition in _conditions(
            key_id=key_id, method=method, path_contains=path_contains, status=status, since=since, until=until
        ):
            statement = statement.where(condition)
        statement = statement.order_by(col(AuditRow.id).desc()).limit(limit).offset(offset)
        with Session(self._engine) as session:
            return [_entry(r) for r in session.exec(statement)]


def _conditions(
    *,
    key_id: str | None,
    method: str | None,
    path_contains: str | None,
    status: StatusFilter | None,
    since: datetime | None,
    until: datetime | None,
) -> builtins.list[ColumnElement[bool]]:
    """The WHERE clauses of a listing; each filter left as None narrows nothing."""
    found: builtins.list[ColumnElement[bool]] = []
    if key_id is not None:
        found.append(col(AuditRow.key_id) == key_id)
    if method is not None:
        found.append(col(AuditRow.method) == method)
    if path_contains:
        # lower() on both sides, LIKE with its wildcards escaped: the same answer on SQLite and PostgreSQL.
        found.append(func.lower(col(AuditRow.path)).contains(path_contains.lower(), autoescape=True))
    if status is not None:
        found.append(_status_condition(status))
    if since is not None:
        found.append(col(AuditRow.at) >= since)
    if until is not None:
        found.append(col(AuditRow.at) < until)
    return found


def _status_condition(status: StatusFilter) -> ColumnElement[bool]:
    if status == "done":
        return col(AuditRow.status) < REFUSED_FROM
    if status == "refused":
        return col(AuditRow.status) >= REFUSED_FROM
    return col(AuditRow.status) == status


def _entry(row: AuditRow) -> AuditEntry:
    values: dict[str, Any] = row.model_dump()
    values["role"] = plain_role(row.role)
    return AuditEntry.model_validate(values)
