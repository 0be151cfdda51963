"""Pool tokens on the store: minting, listing and revoking them, and the places their nodes take.

A pool token admits the nodes of one pool at once (node_admission.py `join`), so what a leaked copy can do is
bounded here, in the database every control plane shares:
- only the token's sha256 is kept, so a copy of the database admits nobody;
- at most `max_nodes` of its nodes are in the fleet at once: each join raises the token's `nodes` by one
  conditional UPDATE (`nodes < max_nodes`, not revoked, not expired) in the join's own transaction, so of
  concurrent joins on SQLite (one writer at a time) or PostgreSQL (the UPDATE waits on the row's lock, then
  reads the committed count again) no more than the cap get in, and a join refused for any reason after it
  (its id is taken) rolls its place back with it;
- a revoked node keeps its place (revoking must not make room for the next join of a leaked copy); removing it
  (`berth nodes remove`) gives the place back. So does a node the autoscaler took away: once it has been lost
  (silent while a control plane listened) for `POOL_NODE_GONE_S`, a join that finds the token full drops it
  (node_admission.py), so a pool that shrinks and grows again needs no person either. Its holder gains nothing
  by it: its nodes are still at most `max_nodes` at once.
"""

from __future__ import annotations

import builtins
import hashlib
import json
import secrets
from datetime import datetime, timedelta

from sqlalchemy import Engine, update
from sqlmodel import Session, col, select

from sdk import Conflict, NotFound, Unauthorized
from sdk.wire.node_pools import PoolToken, PoolTokenRequest, PoolTokenView

from .tables import NodePoolTokenRow, NodeRow, utcnow

POOL_TOKEN_PREFIX = "berth-pool_"  # tells a pool token from the others, in a log line or a secret scanner
_TOKEN_BYTES = 32  # 256 bits, as urlsafe base64: far beyond guessing, so a plain sha256 is as strong
# A full pool frees a place when an operator removes one of its nodes, or one has been gone an hour: a joining
# agent asks again this often.
POOL_FULL_RETRY_S = 60
# A pool node lost this long is gone for good, its place free for the next join: an hour (3,600 s) outlasts what
# brings a node back under its id (a network partition, a control-plane restart, a reboot: minutes). A pool that
# loses more than max_nodes machines an hour waits for `berth nodes remove`, or a token with more places.
POOL_NODE_GONE_S = 3600


def is_pool_token(token: str) -> bool:
    return token.startswith(POOL_TOKEN_PREFIX)


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class PoolTokenRefused(Unauthorized):
    def __init__(self, message: str) -> None:
        super().__init__(message, field="join_token", status_code=401)


class PoolTokenNotFound(NotFound):
    def __init__(self, token_id: str) -> None:
        super().__init__(f"no pool token {token_id!r} (berth nodes pool-token list)", field="token_id", status_code=404)


class PoolFull(Conflict):
    """The token's nodes hold every place it has: a join waits until an operator removes one (or mints more)."""

    retry_after_s = POOL_FULL_RETRY_S

    def __init__(self, token: NodePoolTokenRow) -> None:
        super().__init__(
            f"pool token {token.token_id} of pool {token.pool!r} has {token.nodes} nodes in the fleet, its cap"
            f" (max_nodes {token.max_nodes}); a place frees when an operator removes one of them"
            f" (berth nodes remove NODE_ID) or one has been lost for {POOL_NODE_GONE_S} s, or mint a token with"
            " more (berth nodes pool-token create)",
            field="join_token",
            status_code=429,
        )


class SqlNodePools:
    """Pool tokens, on the control-plane database."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def create(
        self, pool: str, request: PoolTokenRequest, created_by: str | None = None, now: datetime | None = None
    ) -> PoolToken:
        """A pool token for `pool`; the answer is the only place its secret appears."""
        now = now or utcnow()
        token = POOL_TOKEN_PREFIX + secrets.token_urlsafe(_TOKEN_BYTES)
        row = NodePoolTokenRow(
            token_id=f"pt-{secrets.token_hex(6)}",
            token_sha256=_digest(token),
            pool=pool,
            max_nodes=request.max_nodes,
            trust_labels_json=json.dumps(request.trust.labels()),
            created_by=created_by,
            created_at=now,
            expires_at=now + timedelta(seconds=request.ttl_s),
        )
        with Session(self._engine) as session:
            session.add(row)
            session.commit()
            return PoolToken(**_view(row).model_dump(), join_token=token)

    def list(self, pool: str | None = None) -> builtins.list[PoolTokenView]:
        """Every pool token, oldest first (none of their secrets: only hashes are kept)."""
        query = select(NodePoolTokenRow).order_by(col(NodePoolTokenRow.created_at), col(NodePoolTokenRow.token_id))
        if pool is not None:
            query = query.where(NodePoolTokenRow.pool == pool)
        with Session(self._engine) as session:
            return [_view(row) for row in session.exec(query).all()]

    def revoke(self, token_id: str, now: datetime | None = None) -> PoolTokenView:
        """No node joins with the token any more (idempotent); the nodes that joined keep their own secrets."""
        with Session(self._engine) as session:
            row = session.get(NodePoolTokenRow, token_id)
            if row is None:
                raise PoolTokenNotFound(token_id)
            if row.revoked_at is None:
                row.revoked_at = now or utcnow()
                session.add(row)
                session.commit()
                session.refresh(row)
            return _view(row)


def pool_ticket(session: Session, token: str, now: datetime) -> NodePoolTokenRow:
    """The pool token `token` is, if it may still admit a node; else PoolTokenRefused saying why."""
    row = session.exec(select(NodePoolTokenRow).where(NodePoolTokenRow.token_sha256 == _digest(token))).first()
    if row is None:
        raise PoolTokenRefused("the join token is wrong: no pool token hashes to it (berth nodes pool-token list)")
    if row.revoked_at is not None:
        raise PoolTokenRefused(
            f"pool token {row.token_id} of pool {row.pool!r} was revoked at"
            f" {row.revoked_at.isoformat(timespec='seconds')}; an operator mints another (berth nodes pool-token create)"
        )
    if row.expires_at <= now:
        raise PoolTokenRefused(
            f"pool token {row.token_id} of pool {row.pool!r} expired at"
            f" {row.expires_at.isoformat(timespec='seconds')}; an operator mints another (berth nodes pool-token create)"
        )
    return row


def take_place(session: Session, ticket: NodePoolTokenRow, now: datetime) -> None:
    """One of the token's places for a joining node: one conditional UPDATE, so concurrent joins never pass the cap.
    PoolFull when none is left; PoolTokenRefused when the token was revoked or expired since it was read."""
    taken = session.exec(
        update(NodePoolTokenRow)
        .where(
            col(NodePoolTokenRow.token_id) == ticket.token_id,
            col(NodePoolTokenRow.nodes) < col(NodePoolTokenRow.max_nodes),
            col(NodePoolTokenRow.revoked_at).is_(None),
            col(NodePoolTokenRow.expires_at) > now,
        )
        .values(nodes=col(NodePoolTokenRow.nodes) + 1)
    ).rowcount
    if taken != 1:
        session.refresh(ticket)  # what a concurrent join or revocation left: the refusal says which
        if ticket.revoked_at is not None or ticket.expires_at <= now:
            raise PoolTokenRefused(f"pool token {ticket.token_id} was revoked or expired a moment ago")
        raise PoolFull(ticket)


def give_back_place(session: Session, node: NodeRow) -> None:
    """A node of a pool token leaves the fleet's records (removed, or replaced by a new admission of its id)."""
    if node.pool_token_id is not None:
        release_place(session, node.pool_token_id)


def release_place(session: Session, token_id: str) -> None:
    session.exec(
        update(NodePoolTokenRow)
        .where(col(NodePoolTokenRow.token_id) == token_id, col(NodePoolTokenRow.nodes) > 0)
        .values(nodes=col(NodePoolTokenRow.nodes) - 1)
    )


def gone_cutoff(now: datetime) -> datetime:
    """A pool node lost and silent since before this is gone (POOL_NODE_GONE_S)."""
    return now - timedelta(seconds=POOL_NODE_GONE_S)


def _view(row: NodePoolTokenRow) -> PoolTokenView:
    return PoolTokenView(
        token_id=row.token_id,
        pool=row.pool,
        max_nodes=row.max_nodes,
        nodes=row.nodes,
        labels=json.loads(row.trust_labels_json or "{}"),
        created_by=row.created_by,
        created_at=row.created_at,
        expires_at=row.expires_at,
        revoked_at=row.revoked_at,
    )
