"""API keys: made with a secret shown once, kept as the secret's sha256, checked in constant time.

A key reads `berth_<key id>_<secret>`. The id is the row's primary key, so a request is
checked with one indexed read, and logs and the audit log can name the key without its
secret. The secret is 32 random bytes: far beyond guessing, so a plain sha256 (no salt, no
slow hash) is as strong as the secret and costs microseconds on every request. Nothing here
ever stores, returns (after creation) or logs the secret.
"""

from __future__ import annotations

import builtins
import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import Engine, update
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from sdk import FINAL_STATUSES, NotFound, Unauthorized
from sdk.wire.identity import KEY_PREFIX, ApiKeyView, CreatedKey, Role

from .tables import ApiKeyRow, TaskRow, utcnow

FINAL_VALUES = frozenset(s.value for s in FINAL_STATUSES)

_SECRET_BYTES = 32
_ID_BYTES = 6  # 12 hex characters: unique enough for a table of keys, short enough to read aloud
# `last_used_at` is written at most this often per key, so an API busy with one key does not
# turn every read into a write.
LAST_USED_RESOLUTION = timedelta(seconds=60)


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def split_key(key: str) -> tuple[str, str] | None:
    """(key id, secret) of a well-formed key, else None. The id is hex, the secret may hold `_`."""
    if not key.startswith(KEY_PREFIX):
        return None
    key_id, sep, secret = key[len(KEY_PREFIX) :].partition("_")
    if not sep or not key_id or not secret:
        return None
    return key_id, secret


@dataclass(frozen=True)
class KeyHolder:
    """Who a valid key says the caller is."""

    key_id: str
    role: Role
    tenant: str | None
    task_id: str | None = None


class KeyConflict(Exception):
    """A key given from outside (BERTH_ADMIN_KEY) names an id the store holds as another key."""


def _view(row: ApiKeyRow) -> ApiKeyView:
    return ApiKeyView.model_validate(row.model_dump(exclude={"secret_sha256"}))


class SqlApiKeys:
    """API keys on the control-plane database."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def create(
        self, role: Role, tenant: str | None = None, name: str = "", description: str = "", task_id: str | None = None
    ) -> CreatedKey:
        """A new key; the answer is the only place its secret ever appears. With `task_id`, a task token."""
        key_id = secrets.token_hex(_ID_BYTES)
        secret = secrets.token_urlsafe(_SECRET_BYTES)
        row = ApiKeyRow(
            key_id=key_id,
            secret_sha256=hash_secret(secret),
            role=role.value,
            tenant=tenant,
            name=name,
            description=description,
            task_id=task_id,
        )
        with Session(self._engine) as session:
            session.add(row)
            session.commit()
            session.refresh(row)
            view = _view(row)
        return CreatedKey(**view.model_dump(), key=f"{KEY_PREFIX}{key_id}_{secret}")

    def install(
        self, key_id: str, secret: str, role: Role, name: str = "", description: str = ""
    ) -> tuple[ApiKeyView, bool]:
        """Keep a key whose secret was chosen outside Berth (BERTH_ADMIN_KEY); True when it was new.

        A new id is inserted; an id already held with this secret and role is left as it is (revoked or not:
        a revocation stands); an id held with another secret or role raises KeyConflict, since overwriting
        it would silently change who holds that key. Several control-plane replicas start at once with the
        same key: the insert that loses the race on the primary key reads the winner's row and checks it
        as it would any existing one.
        """
        digest = hash_secret(secret)
        row = self._get(key_id)
        created = False
        if row is None:
            try:
                with Session(self._engine) as session:
                    session.add(
                        ApiKeyRow(
                            key_id=key_id, secret_sha256=digest, role=role.value, name=name, description=description
                        )
                    )
                    session.commit()
                created = True
            except IntegrityError:
                pass  # another replica inserted it first: checked below like any existing row
            row = self._get(key_id)
            assert row is not None, f"API key {key_id} was inserted but cannot be read back"
        if not hmac.compare_digest(row.secret_sha256, digest):
            raise KeyConflict(f"API key {key_id} already exists with a different secret")
        if row.role != role.value or row.task_id is not None or row.tenant is not None:
            what = f"the token of task {row.task_id}" if row.task_id else f"a {row.role} key"
            raise KeyConflict(f"API key {key_id} already exists as {what}, not as a {role.value} key")
        return _view(row), created

    def _get(self, key_id: str) -> ApiKeyRow | None:
        with Session(self._engine) as session:
            return session.get(ApiKeyRow, key_id)

    def authenticate(self, key: str) -> KeyHolder:
        """The holder of a valid key; Unauthorized for a malformed, unknown, wrong or revoked one."""
        parts = split_key(key)
        if parts is None:
            raise Unauthorized("the API key is malformed; keys read berth_<id>_<secret>", status_code=401)
        key_id, secret = parts
        with Session(self._engine) as session:
            row = session.get(ApiKeyRow, key_id)
            task = session.get(TaskRow, row.task_id) if row is not None and row.task_id else None
        # compare_digest: how long a refusal takes must not tell how much of the secret was right.
        if row is None or not hmac.compare_digest(row.secret_sha256, hash_secret(secret)):
            raise Unauthorized(f"API key {key_id} is not valid", status_code=401)
        if row.revoked_at is not None:
            raise Unauthorized(
                f"API key {key_id} was revoked at {row.revoked_at:%Y-%m-%d %H:%M:%S} UTC", status_code=401
            )
        if row.task_id is not None and (task is None or task.status in FINAL_VALUES):
            # A task token lives as long as its task: what the task started ends with it.
            raise Unauthorized(f"API key {key_id} is the token of task {row.task_id}, which has ended", status_code=401)
        if row.last_used_at is None or row.last_used_at < utcnow() - LAST_USED_RESOLUTION:
            self._touch(key_id)
        return KeyHolder(key_id=key_id, role=Role(row.role), tenant=row.tenant, task_id=row.task_id)

    def list(self) -> builtins.list[ApiKeyView]:
        with Session(self._engine) as session:
            return [_view(r) for r in session.exec(select(ApiKeyRow).order_by(col(ApiKeyRow.created_at)))]

    def is_live(self, key_id: str) -> bool:
        """Whether the key exists and is not revoked (a long-lived stream asks again now and then)."""
        with Session(self._engine) as session:
            row = session.get(ApiKeyRow, key_id)
        return row is not None and row.revoked_at is None

    def revoke(self, key_id: str) -> ApiKeyView:
        """Revoke a key (again is a no-op that keeps the first time); NotFound for an unknown id."""
        with Session(self._engine) as session:
            row = session.get(ApiKeyRow, key_id)
            if row is None:
                raise NotFound(f"API key {key_id!r} does not exist", field="key_id")
            if row.revoked_at is None:
                row.revoked_at = utcnow()
                session.add(row)
                session.commit()
                session.refresh(row)
            return _view(row)

    def _touch(self, key_id: str) -> None:
        # Decided on the row just read, so most requests write nothing: on SQLite even an UPDATE
        # that changes no row takes the database's one write lock.
        with Session(self._engine) as session:
            session.exec(
                update(ApiKeyRow)
                .where(col(ApiKeyRow.key_id) == key_id)
                .values(last_used_at=utcnow())
                .execution_options(synchronize_session=False)
            )
            session.commit()
