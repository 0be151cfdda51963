"""The pool's leases, written through so a restarted pool still counts the load in flight.

The pool books a lease in memory first (placement must see it at once) and then here; a
lease is deleted when its step releases it, or with its node when the node is lost.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass

from sqlalchemy import ColumnElement, Engine, delete, func
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from .tables import LeaseRow


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


class SqlLeases:
    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def add(self, lease: LeaseRecord) -> LeaseRecord:
        """Record a lease; when (task, step) already holds one, that one is returned instead."""
        with Session(self._engine) as session:
            session.add(LeaseRow(**lease.__dict__))
            try:
                session.commit()
                return lease
            except IntegrityError:
                session.rollback()
        existing = self.for_step(lease.task_id, lease.step)
        if existing is None:  # released between the two statements: record it again
            return self.add(lease)
        return existing

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

    def _delete(self, where: ColumnElement[bool]) -> builtins.list[LeaseRecord]:
        with Session(self._engine) as session:
            rows = session.execute(delete(LeaseRow).where(where).returning(*LeaseRow.__table__.columns)).all()
            session.commit()
        return [_record(LeaseRow.model_validate(dict(r._mapping))) for r in rows]

    def list(self) -> builtins.list[LeaseRecord]:
        with Session(self._engine) as session:
            return [_record(r) for r in session.exec(select(LeaseRow).order_by(col(LeaseRow.created_at)))]

    def load_of_other_pools(self, pool_id: str) -> dict[str, tuple[int, int]]:
        """Replica id → (leases, tokens) that pools other than `pool_id` hold on it: load this pool's view
        of the fleet does not book itself (several control-plane replicas share the GPUs)."""
        with Session(self._engine) as session:
            rows = session.exec(select(LeaseRow.replica_id, func.count(), func.coalesce(func.sum(LeaseRow.tokens), 0))
                                .where(LeaseRow.pool_id != pool_id).group_by(LeaseRow.replica_id)).all()
        return {replica_id: (int(count), int(tokens)) for replica_id, count, tokens in rows}

    def node_holds(self, node_id: str, task_id: str) -> bool:
        """Does `node_id` hold a lease for `task_id`? (A node may read only the tasks it serves.)"""
        with Session(self._engine) as session:
            query = select(LeaseRow.lease_id).where(LeaseRow.node_id == node_id, LeaseRow.task_id == task_id)
            return session.exec(query).first() is not None


def _record(row: LeaseRow) -> LeaseRecord:
    return LeaseRecord(lease_id=row.lease_id, task_id=row.task_id, step=row.step, model=row.model,
                       node_id=row.node_id, replica_id=row.replica_id, tokens=row.tokens, tenant=row.tenant,
                       created_replica=row.created_replica, pool_id=row.pool_id)
