"""The pool's leases, written through so a restarted pool still counts the load in flight.

The pool books a lease in memory first (placement must see it at once) and then here; a
lease is deleted when its step releases it, or with its node when the node is lost.

A lease is also what a GPU node's bookkeeping is checked against: it names the one step the node
may read and book right now, the limits the step's workflow set (`StepLimits`), and, once the
control plane has counted the step's prompt, what it reserved for the call (`CallReservation`).
Each attempt a node prepares is kept too, with its reservation (`step_attempts`), beyond the lease:
what a step's round may book for an attempt is bounded by whether it started and what it was granted.
"""

from __future__ import annotations

import builtins
import dataclasses
import json
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy import ColumnElement, Engine, bindparam, delete, func, update
from sqlalchemy.engine import Row
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from sdk.wire.lease import StepLimits

from .connections import connected
from .tables import LeaseRow, StepAttemptRow, table_of, utcnow


@dataclass(frozen=True)
class CallReservation:
    """What the control plane set aside for a leased step's call: the prompt it counted (with the margin for
    an engine's template) and the answer tokens it granted. A node books at most their sum."""

    prompt_tokens: int
    max_tokens: int

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.max_tokens


@dataclass(frozen=True)
class LeaseRecord:
    lease_id: str
    task_id: str
    step: int
    model: str
    node_id: str
    replica_id: str
    tokens: int
    tenant: str
    created_replica: bool = False
    pool_id: str = ""  # the pool that granted it
    limits: StepLimits | None = None  # None only for leases from before limits were kept: a node books nothing on it
    reservation: CallReservation | None = None  # set when the node prepared the call


_LEASES = table_of(LeaseRow)
_ATTEMPTS = table_of(StepAttemptRow)
# A node's prepare and settle read the lease they name and prepare writes its reservation: built once.
_GET = sa.select(_LEASES).where(_LEASES.c.lease_id == bindparam("lease_id"))
_RESERVE = (
    update(_LEASES)
    .where(_LEASES.c.lease_id == bindparam("lease"))
    .values(reservation_json=bindparam("reservation_json"))
    .returning(*_LEASES.columns)
)
_KEY = ("task_id", "step", "attempt")
_RECORD_ATTEMPT = sa.insert(_ATTEMPTS)
_FORGET_ATTEMPT = delete(_ATTEMPTS).where(*(_ATTEMPTS.c[k] == bindparam(k) for k in _KEY))
_PREPARED = (
    sa.select(_ATTEMPTS.c.attempt, _ATTEMPTS.c.prompt_tokens, _ATTEMPTS.c.max_tokens)
    .where(
        _ATTEMPTS.c.task_id == bindparam("task_id"),
        _ATTEMPTS.c.step == bindparam("step"),
        _ATTEMPTS.c.attempt >= bindparam("from_attempt"),
    )
    .order_by(_ATTEMPTS.c.attempt)
)
_PREPARED_UNDER = sa.select(_ATTEMPTS.c.attempt, _ATTEMPTS.c.prepared_at).where(
    _ATTEMPTS.c.lease_id == bindparam("lease_id")
)


class SqlLeases:
    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def add(self, lease: LeaseRecord) -> LeaseRecord:
        """Record a lease; when (task, step) already holds one, that one is returned instead."""
        with Session(self._engine) as session:
            session.add(_row(lease))
            try:
                session.commit()
                return lease
            except IntegrityError:
                session.rollback()
        existing = self.for_step(lease.task_id, lease.step)
        if existing is None:  # released between the two statements: record it again
            return self.add(lease)
        return existing

    def get(self, lease_id: str) -> LeaseRecord | None:
        with connected(self._engine) as connection:
            row = connection.execute(_GET, {"lease_id": lease_id}).first()
        return _record(row) if row is not None else None

    def reserve_call(self, lease_id: str, reservation: CallReservation, attempt: int) -> LeaseRecord | None:
        """Keep what was reserved for the lease's call, as its latest and as `attempt`'s (a prepare of that attempt
        retried later replaces it); None, keeping nothing, when the lease is gone (released meanwhile)."""
        with connected(self._engine) as connection:
            # One conditional UPDATE: a lease released meanwhile (its node lost, its step released) matches
            # nothing, where a read-then-write would fail on the vanished row.
            row = connection.execute(
                _RESERVE, {"lease": lease_id, "reservation_json": json.dumps(dataclasses.asdict(reservation))}
            ).first()
            if row is None:
                return None
            # Delete, then insert: one statement pair both dialects run alike, inside the caller's transaction.
            key = {"task_id": row.task_id, "step": row.step, "attempt": attempt}
            connection.execute(_FORGET_ATTEMPT, key)
            connection.execute(
                _RECORD_ATTEMPT,
                {
                    **key,
                    "lease_id": lease_id,
                    "prompt_tokens": reservation.prompt_tokens,
                    "max_tokens": reservation.max_tokens,
                    "prepared_at": utcnow(),
                },
            )
        return _record(row)

    def prepared_attempts(self, task_id: str, step: int, from_attempt: int) -> dict[int, CallReservation]:
        """The attempts of a step, from `from_attempt` on (a round), that a node prepared under any lease, with what
        was reserved for each: whether a lease's attempt started, and the most it could have written."""
        with connected(self._engine) as connection:
            rows = connection.execute(_PREPARED, {"task_id": task_id, "step": step, "from_attempt": from_attempt}).all()
        return {r.attempt: CallReservation(prompt_tokens=r.prompt_tokens, max_tokens=r.max_tokens) for r in rows}

    def prepared_under(self, lease_id: str) -> dict[int, datetime]:
        """The attempts a lease's node prepared, with when each was last prepared: the evidence that the one
        before an attempt went quiet long enough for the workflow to have started it."""
        with connected(self._engine) as connection:
            rows = connection.execute(_PREPARED_UNDER, {"lease_id": lease_id}).all()
        return {r.attempt: r.prepared_at for r in rows}

    def for_step(self, task_id: str, step: int) -> LeaseRecord | None:
        with Session(self._engine) as session:
            row = session.exec(select(LeaseRow).where(LeaseRow.task_id == task_id, LeaseRow.step == step)).first()
            return _record(row) if row is not None else None

    def release(self, lease_id: str) -> LeaseRecord | None:
        """Delete a lease; the record it was, or None when it was released already (a retried release, or
        another control-plane replica's release of it): one statement, so only one caller gets the record."""
        deleted = self._delete(col(LeaseRow.lease_id) == lease_id)
        return deleted[0] if deleted else None

    def release_node(self, node_id: str) -> builtins.list[LeaseRecord]:
        """Delete every lease on a node (it was lost); the records this call deleted."""
        return self._delete(col(LeaseRow.node_id) == node_id)

    def release_task(self, task_id: str) -> builtins.list[LeaseRecord]:
        """Delete every lease a task holds (it ended without its workflow releasing them); the records deleted."""
        return self._delete(col(LeaseRow.task_id) == task_id)

    def ids_of_pool(self, pool_id: str) -> set[str]:
        """The leases `pool_id` granted that are still held (released ones are deleted, by whoever released them)."""
        with Session(self._engine) as session:
            return set(session.exec(select(LeaseRow.lease_id).where(LeaseRow.pool_id == pool_id)))

    def _delete(self, where: ColumnElement[bool]) -> builtins.list[LeaseRecord]:
        with Session(self._engine) as session:
            rows = session.execute(delete(LeaseRow).where(where).returning(*_LEASES.columns)).all()
            session.commit()
        return [_record(LeaseRow.model_validate(dict(r._mapping))) for r in rows]

    def list(self) -> builtins.list[LeaseRecord]:
        with Session(self._engine) as session:
            return [_record(r) for r in session.exec(select(LeaseRow).order_by(col(LeaseRow.created_at)))]

    def load_of_other_pools(self, pool_id: str) -> dict[str, tuple[int, int]]:
        """Replica id → (leases, tokens) that pools other than `pool_id` hold on it: load this pool's view
        of the fleet does not book itself (several control-plane replicas share the GPUs)."""
        with Session(self._engine) as session:
            rows = session.exec(
                select(LeaseRow.replica_id, func.count(), func.coalesce(func.sum(LeaseRow.tokens), 0))
                .where(LeaseRow.pool_id != pool_id)
                .group_by(LeaseRow.replica_id)
            ).all()
        return {replica_id: (int(count), int(tokens)) for replica_id, count, tokens in rows}


def _row(lease: LeaseRecord) -> LeaseRow:
    fields = {k: v for k, v in lease.__dict__.items() if k not in ("limits", "reservation")}
    return LeaseRow(
        **fields,
        limits_json=lease.limits.model_dump_json() if lease.limits is not None else "",
        reservation_json=(json.dumps(dataclasses.asdict(lease.reservation)) if lease.reservation is not None else None),
    )


def _record(row: LeaseRow | Row) -> LeaseRecord:
    return LeaseRecord(
        lease_id=row.lease_id,
        task_id=row.task_id,
        step=row.step,
        model=row.model,
        node_id=row.node_id,
        replica_id=row.replica_id,
        tokens=row.tokens,
        tenant=row.tenant,
        created_replica=row.created_replica,
        pool_id=row.pool_id,
        limits=StepLimits.model_validate_json(row.limits_json) if row.limits_json else None,
        reservation=CallReservation(**json.loads(row.reservation_json)) if row.reservation_json else None,
    )
