"""Admin UI sessions: a browser signs in once with an API key and then carries a cookie.

The cookie is a random token; only its sha256 is stored, like an API key's secret, so a copy of
the database lets nobody in. A session is only as good as its key: it is read together with the
key's row on every request, so revoking the key ends every session made with it at once, and
the session has the key's role and tenant, never more. Each session has its own CSRF token,
which every form the UI serves carries back.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import Engine, delete
from sqlmodel import Session, col, select

from sdk.wire.identity import Role

from .tables import ApiKeyRow, UiSessionRow, utcnow

# A working day: an operator signs in in the morning; a cookie lost at night is soon worthless.
SESSION_LIFETIME = timedelta(hours=12)
_TOKEN_BYTES = 32


@dataclass(frozen=True)
class UiSession:
    """A live session: who it acts for (the key's id, role and tenant) and its CSRF token."""

    key_id: str
    role: Role
    tenant: str | None
    csrf_token: str
    expires_at: datetime


@dataclass(frozen=True)
class NewSession:
    cookie: str
    session: UiSession


def _sha256(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class SqlUiSessions:
    """UI sessions on the control-plane database."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def start(self, key_id: str, role: Role, tenant: str | None, now: datetime | None = None) -> NewSession:
        """A session for a key the caller has just authenticated; the cookie value appears only here."""
        now = now or utcnow()
        cookie, csrf_token = secrets.token_urlsafe(_TOKEN_BYTES), secrets.token_urlsafe(_TOKEN_BYTES)
        expires_at = now + SESSION_LIFETIME
        row = UiSessionRow(
            session_sha256=_sha256(cookie), key_id=key_id, csrf_token=csrf_token, created_at=now, expires_at=expires_at
        )
        with Session(self._engine) as session:
            # Sweeping expired rows on sign-in keeps the table the size of the people signed in.
            session.exec(delete(UiSessionRow).where(col(UiSessionRow.expires_at) < now))
            session.add(row)
            session.commit()
        return NewSession(cookie, UiSession(key_id, role, tenant, csrf_token, expires_at))

    def resolve(self, cookie: str, now: datetime | None = None) -> UiSession | None:
        """The session of a cookie, unless unknown, expired, or its key revoked."""
        now = now or utcnow()
        with Session(self._engine) as session:
            found = session.exec(
                select(UiSessionRow, ApiKeyRow)
                .join(ApiKeyRow, col(ApiKeyRow.key_id) == col(UiSessionRow.key_id))
                .where(col(UiSessionRow.session_sha256) == _sha256(cookie))
            ).first()
        if found is None:
            return None
        row, key = found
        if row.expires_at <= now or key.revoked_at is not None:
            return None
        return UiSession(key.key_id, Role(key.role), key.tenant, row.csrf_token, row.expires_at)

    def end(self, cookie: str) -> None:
        with Session(self._engine) as session:
            session.exec(delete(UiSessionRow).where(col(UiSessionRow.session_sha256) == _sha256(cookie)))
            session.commit()
