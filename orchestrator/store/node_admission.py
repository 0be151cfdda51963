"""Who is in the fleet: per-node join tokens, joining, approval, revocation and removal.

One leaked secret must not be a key to the fleet, so a node gets in one of three ways:
- with a **per-node join token** an operator minted for its id (`berth nodes admit`): bound to that id,
  usable once, expiring; only its sha256 is kept (as for API keys, keys.py), so a copy of the database
  admits nobody. The node is admitted at once;
- with the **cluster join token** (config `join_token`): the node is `pending` until an operator approves
  it. It heartbeats, so its GPUs are seen, but it is given no work and books no step (fleet.py);
- with a **pool token** (`berth nodes pool-token create`, node_pools.py): any id not held, admitted at once into
  the token's pool with its trust labels, while the token has a place left and is neither expired nor revoked.
  It never takes an admitted or a revoked node's id: revoking a node must not be undone by a token it holds.

Either way the control plane mints the node's secret at its first registration; a secret the node offers
then is ignored. A node that holds a credential proves itself with it: re-registering under its id needs
its secret, not a join token again (a per-node token is spent by then), and keeps its admission. A
revoked node's secret is gone, so it must be admitted anew, like a node never seen.

Spending a token happens in the registration's own transaction, so two registrations racing with one
token admit one node; a refused registration spends nothing.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import Engine, delete, func, update
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from sdk import Conflict, Unauthorized
from sdk.wire.fleet import NodeAdmission, NodeSpec, NodeView

from .fleet import (
    REVOKED_MARK,
    NodeConflict,
    NodeNotFound,
    new_node_row,
    node_view,
    proves,
    restatus,
    write_spec,
)
from .node_pools import give_back_place, gone_cutoff, is_pool_token, pool_ticket, release_place, take_place
from .pending_nodes import DEFAULT_ROOM, PendingRoom, check_room, drop_stale
from .tables import (
    GpuReservationRow,
    LeaseRow,
    NodeGpuRow,
    NodeJoinTokenRow,
    NodeRow,
    NodeWeightsRow,
    ReplicaRow,
    utcnow,
)

TOKEN_PREFIX = "berth-join_"  # tells a per-node token from the cluster token, in a log line or a secret scanner
_TOKEN_BYTES = 32  # 256 bits, as urlsafe base64: far beyond guessing, so a plain sha256 is as strong


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class JoinTokenRefused(Unauthorized):
    def __init__(self, message: str) -> None:
        super().__init__(message, field="join_token", status_code=401)


@dataclass(frozen=True)
class Joined:
    """A registration let in: the node, the secret its heartbeats carry, and whether the id was new to the fleet."""

    node: NodeView
    node_secret: str
    created: bool


class SqlNodeAdmission:
    """Join tokens and the admission of nodes, on the control-plane database."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def mint(
        self, node_id: str, ttl_s: float, created_by: str | None = None, now: datetime | None = None
    ) -> NodeAdmission:
        """A per-node join token for `node_id`, valid for `ttl_s`; the answer is the only place it appears.

        Refused for a node already admitted: a second machine under a live node's id would take its GPUs and
        its leases. Revoke or remove that node first. Expired tokens are cleared here, so they never pile up.
        """
        now = now or utcnow()
        token = TOKEN_PREFIX + secrets.token_urlsafe(_TOKEN_BYTES)
        expires_at = now + timedelta(seconds=ttl_s)
        with Session(self._engine) as session:
            row = session.get(NodeRow, node_id)
            if row is not None and row.admission == "admitted":
                raise Conflict(
                    f"node {node_id!r} is admitted already (status {row.status}); revoke or remove it"
                    " before admitting a machine under its id",
                    field="node_id",
                    status_code=409,
                )
            session.exec(delete(NodeJoinTokenRow).where(col(NodeJoinTokenRow.expires_at) <= now))
            session.add(
                NodeJoinTokenRow(
                    token_sha256=_digest(token),
                    node_id=node_id,
                    created_by=created_by,
                    created_at=now,
                    expires_at=expires_at,
                )
            )
            session.commit()
        return NodeAdmission(node_id=node_id, join_token=token, expires_at=expires_at)

    def joining(self, now: datetime | None = None) -> int:
        """Join tokens minted and not yet used or expired: machines on their way into the fleet, whose GPUs
        nothing can judge yet (`pool/feasibility.py` refuses no model while one is outstanding)."""
        now = now or utcnow()
        with Session(self._engine) as session:
            return session.exec(
                select(func.count())
                .select_from(NodeJoinTokenRow)
                .where(col(NodeJoinTokenRow.used_at).is_(None), col(NodeJoinTokenRow.expires_at) > now)
            ).one()

    def join(
        self,
        spec: NodeSpec,
        node_secret: str | None,
        join_token: str,
        *,
        cluster_token: bool,
        waiting: PendingRoom = DEFAULT_ROOM,
        now: datetime | None = None,
    ) -> Joined:
        """Let a registering node in, or refuse it (changing nothing), naming the field to blame.

        `cluster_token`: the caller found `join_token` to be the cluster's. A node that proves its id with its
        secret re-registers (a valid per-node token then approves a pending one). Otherwise a per-node token
        admits the node, replacing a pending registration of its id (the operator's word outranks a stranger's
        claim); the cluster token makes it pending, if `waiting` has a place (pending_nodes.py); a pool token
        admits it into its pool (`_join_pool`); an id held by another node is refused (409).
        """
        now = now or utcnow()
        with Session(self._engine) as session:
            drop_stale(session, waiting.ttl_s, now)
            row = session.get(NodeRow, spec.node_id)
            ticket = _ticket(session, join_token, spec.node_id, now)
            if row is not None and row.admission != "revoked" and proves(row, node_secret):
                if isinstance(ticket, NodeJoinTokenRow):
                    _spend(session, ticket, row, now)
                write_spec(session, row, spec, now)
                return self._commit(session, row, node_secret or "", created=False)
            if is_pool_token(join_token) and not cluster_token:
                return self._join_pool(session, spec, row, join_token, now)
            if isinstance(ticket, str) and not cluster_token:
                raise JoinTokenRefused(ticket)
            admission = "admitted" if isinstance(ticket, NodeJoinTokenRow) else "pending"
            held = row is not None and (row.admission == "admitted" or row.admission == admission == "pending")
            if held:  # another node's id: it re-registers with its secret, no other machine takes it over
                raise NodeConflict(spec.node_id)
            if admission == "pending":
                check_room(session, waiting, now)
            secret = secrets.token_urlsafe(_TOKEN_BYTES)
            if row is not None:  # revoked, or a pending claim a per-node token outranks: nothing of it is kept
                _replace(session, row)
            row = new_node_row(spec, secret, admission, now)
            if isinstance(ticket, NodeJoinTokenRow):
                _spend(session, ticket, row, now)
            write_spec(session, row, spec, now)
            return self._commit(session, row, secret, created=True)

    def _join_pool(self, session: Session, spec: NodeSpec, row: NodeRow | None, token: str, now: datetime) -> Joined:
        """Admit a node with a pool token: in the token's pool, with its trust labels (never the node's own word),
        if its id is free or only claimed by a pending node (the operator's token outranks a stranger's claim).

        An admitted node's id is refused as any held id is; so is a revoked node's, which with a per-node token
        would be let in anew: a pool token is no one node's, and a revoked node still holds it."""
        pool = pool_ticket(session, token, now)
        if row is not None and row.admission == "revoked":
            raise Conflict(
                f"node {spec.node_id!r} was revoked: a pool token does not bring it back. An operator admits it"
                f" (berth nodes admit {spec.node_id}) or removes it (berth nodes remove {spec.node_id}) first",
                field="node_id",
                status_code=409,
            )
        if row is not None and row.admission == "admitted":
            raise NodeConflict(spec.node_id)
        if pool.nodes >= pool.max_nodes:
            _drop_gone(session, pool.token_id, now)
        take_place(session, pool, now)
        if row is not None:
            _replace(session, row)
        secret = secrets.token_urlsafe(_TOKEN_BYTES)
        row = new_node_row(spec, secret, "admitted", now)
        row.pool, row.pool_token_id, row.trust_labels_json = pool.pool, pool.token_id, pool.trust_labels_json
        write_spec(session, row, spec, now)
        return self._commit(session, row, secret, created=True)

    def drop_stale(self, ttl_s: float, now: datetime | None = None) -> list[str]:
        """Drop the nodes that waited for approval longer than `ttl_s` (pending_nodes.py); their ids."""
        with Session(self._engine) as session:
            dropped = drop_stale(session, ttl_s, now or utcnow())
            session.commit()
            return dropped

    def approve(self, node_id: str) -> NodeView:
        """Let a pending node into the fleet (idempotent for one admitted already); a revoked node must join anew."""
        with Session(self._engine) as session:
            row = _existing(session, node_id)
            if row.admission == "revoked":
                raise Conflict(
                    f"node {node_id!r} was revoked, and its secret with it: it joins again with a new"
                    f" per-node token (berth nodes admit {node_id})",
                    field="node_id",
                    status_code=409,
                )
            row.admission = "admitted"
            _void_tokens(session, node_id)
            restatus(row, _gpus(session, node_id))
            session.add(row)
            session.commit()
            return node_view(session, row)

    def revoke(self, node_id: str) -> NodeView:
        """Kill the node's credential at once: its secret and any token minted for it stop working, its replicas
        are dropped as a lost node's are, and placement never uses it. The pool releases its leases."""
        with Session(self._engine) as session:
            row = _existing(session, node_id)
            row.admission, row.secret_sha256 = "revoked", REVOKED_MARK + row.secret_sha256.removeprefix(REVOKED_MARK)
            _void_tokens(session, node_id)
            session.exec(delete(ReplicaRow).where(col(ReplicaRow.node_id) == node_id))
            restatus(row, _gpus(session, node_id))
            session.add(row)
            session.commit()
            return node_view(session, row)

    def remove(self, node_id: str) -> None:
        """Forget a node: every row of it (GPUs, replicas, weights, GPU reservations, leases, tokens), so its id
        may be admitted anew. The caller revokes it first, so its steps are told to move."""
        with Session(self._engine) as session:
            row = _existing(session, node_id)
            _forget_state(session, node_id)
            give_back_place(session, row)
            for table in (GpuReservationRow, LeaseRow, NodeJoinTokenRow):
                session.exec(delete(table).where(col(table.node_id) == node_id))
            session.delete(row)
            session.commit()

    @staticmethod
    def _commit(session: Session, row: NodeRow, secret: str, *, created: bool) -> Joined:
        session.add(row)
        try:
            session.commit()
        except IntegrityError:  # the same new id joined concurrently: the other registration holds it
            raise NodeConflict(row.node_id) from None
        return Joined(node=node_view(session, row), node_secret=secret, created=created)


def _ticket(session: Session, token: str, node_id: str, now: datetime) -> NodeJoinTokenRow | str:
    """The unspent per-node token `token` is for `node_id`, or why it is not one (the refusal's wording)."""
    wrong = (
        "the join token is wrong: use a per-node token from `berth nodes admit NODE_ID`, a pool token from"
        " `berth nodes pool-token create`, or the cluster's token (the control plane's <data_dir>/join-token)"
    )
    if not token.startswith(TOKEN_PREFIX):
        return wrong
    row = session.get(NodeJoinTokenRow, _digest(token))
    if row is None:
        return wrong
    # compare_digest: the node id is public, but the check should read the same whatever it is.
    if not hmac.compare_digest(row.node_id.encode(), node_id.encode()):
        return f"this join token admits node {row.node_id!r}, not {node_id!r}"
    if row.used_at is not None:
        return f"this join token was used already (at {row.used_at.isoformat(timespec='seconds')}); mint another"
    if row.expires_at <= now:
        return f"this join token expired at {row.expires_at.isoformat(timespec='seconds')}; mint another"
    return row


def _spend(session: Session, ticket: NodeJoinTokenRow, row: NodeRow, now: datetime) -> None:
    """Use the token (one conditional UPDATE: of two registrations racing with it, one gets it) and admit the node."""
    spent = session.exec(
        update(NodeJoinTokenRow)
        .where(col(NodeJoinTokenRow.token_sha256) == ticket.token_sha256, col(NodeJoinTokenRow.used_at).is_(None))
        .values(used_at=now)
    ).rowcount
    if spent != 1:
        raise JoinTokenRefused("this join token was used already, by a registration a moment ago; mint another")
    row.admission = "admitted"
    _void_tokens(session, row.node_id, keep=ticket.token_sha256)


def _void_tokens(session: Session, node_id: str, keep: str | None = None) -> None:
    """The node is admitted (or revoked): no other token minted for it may admit a machine under its id."""
    query = delete(NodeJoinTokenRow).where(col(NodeJoinTokenRow.node_id) == node_id)
    if keep is not None:
        query = query.where(col(NodeJoinTokenRow.token_sha256) != keep)
    session.exec(query)


def _existing(session: Session, node_id: str) -> NodeRow:
    row = session.get(NodeRow, node_id)
    if row is None:
        raise NodeNotFound(node_id)
    return row


def _gpus(session: Session, node_id: str) -> list[NodeGpuRow]:
    return list(session.exec(select(NodeGpuRow).where(NodeGpuRow.node_id == node_id)).all())


def _drop_gone(session: Session, token_id: str, now: datetime) -> None:
    """Forget the token's nodes lost since before `gone_cutoff` (the autoscaler took them away), freeing their
    places. Each is deleted by a conditional DELETE, and its place given back only if this transaction deleted
    it, so joins racing for a full pool free each place once. A revoked node is never dropped: it keeps its place."""
    gone_when = (
        col(NodeRow.pool_token_id) == token_id,
        col(NodeRow.admission) == "admitted",
        col(NodeRow.lost).is_(True),
        col(NodeRow.seen_at) <= gone_cutoff(now),
    )
    for node_id in session.exec(select(NodeRow.node_id).where(*gone_when)).all():
        if session.exec(delete(NodeRow).where(col(NodeRow.node_id) == node_id, *gone_when)).rowcount != 1:
            continue  # another join dropped it first
        _forget_state(session, node_id)
        for table in (GpuReservationRow, LeaseRow, NodeJoinTokenRow):
            session.exec(delete(table).where(col(table.node_id) == node_id))
        release_place(session, token_id)
    session.flush()


def _replace(session: Session, row: NodeRow) -> None:
    """Clear a node whose id a new admission takes: nothing of it is kept, and a pool token's place is freed."""
    _forget_state(session, row.node_id)
    give_back_place(session, row)
    session.delete(row)
    session.flush()


def _forget_state(session: Session, node_id: str) -> None:
    """What a node reported and registered: its GPUs, replicas and weights."""
    for table in (NodeGpuRow, ReplicaRow, NodeWeightsRow):
        session.exec(delete(table).where(col(table.node_id) == node_id))
