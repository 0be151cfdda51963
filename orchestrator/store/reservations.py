"""GPU reservations: the one check every pool's new replica passes, so several control-plane replicas
never put two replicas' memory on one GPU that cannot hold both.

Each pool places on its own in-memory view of the fleet, refreshed every second; between refreshes
two pools could choose the same free GPU. Before a pool starts a replica it reserves the memory here,
in one transaction that first takes the node's row lock (an UPDATE of it: a row lock on PostgreSQL, the
database's write lock on SQLite) and then counts what is on each GPU: the replicas the node reports,
and the reservations no report has covered yet that are younger than the unreported-load grace. A refused
reservation leaves nothing behind; the pool refreshes its view and places again.

A reservation its node once listed (`reported_at`) holds memory only while the node lists it: a replica
that stopped (its node restarted, or a step saw it fail) has left its GPUs, though its row stays as the
pool's record of the load, so the node serves it again should it list it again.
"""

from __future__ import annotations

import builtins
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import Engine, delete, update
from sqlmodel import Session, col, select

from .tables import GpuReservationRow, NodeRow, ReplicaRow, utcnow

# Memory comparisons allow this much float error (GiB), as placement's own.
EPSILON_GIB = 1 / 1024


@dataclass(frozen=True)
class Reservation:
    replica_id: str
    node_id: str
    model: str
    gpu_indexes: tuple[int, ...]
    per_device_gib: float
    owner: str | None  # an isolated tenant's replica holds its devices alone
    pool_id: str
    created_at: datetime | None = None
    reported_at: datetime | None = None  # when its node first listed the replica


class SqlReservations:
    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def reserve(
        self,
        wanted: Reservation,
        device_gib: Mapping[int, float],
        model_gib: Callable[[str], float],
        fresh_for_s: float,
    ) -> bool:
        """Record `wanted` if its devices still hold it beside everything else on the node; False if not.

        `device_gib`: each device's memory; `model_gib`: a model's memory need, for replicas a node
        reports that no reservation describes (placed before the node's last report by a pool gone since).
        """
        with Session(self._engine) as session:
            locked = session.exec(
                update(NodeRow).where(col(NodeRow.node_id) == wanted.node_id).values(node_id=NodeRow.node_id)
            )
            if locked.rowcount == 0:
                session.rollback()
                return False  # the node left the fleet
            used: dict[int, float] = {}
            owners: dict[int, set[str | None]] = {}
            reported = session.exec(select(ReplicaRow).where(ReplicaRow.node_id == wanted.node_id)).all()
            held = {
                r.replica_id: r
                for r in session.exec(
                    select(GpuReservationRow).where(GpuReservationRow.node_id == wanted.node_id)
                ).all()
            }
            cutoff = utcnow() - timedelta(seconds=fresh_for_s)
            for row in reported:
                devices = json.loads(row.gpu_indexes_json)
                reservation = held.pop(row.replica_id, None)
                share = reservation.per_device_gib if reservation else model_gib(row.model) / max(len(devices), 1)
                _count(used, owners, devices, share, reservation.owner if reservation else None)
            for placed in held.values():
                if placed.reported_at is not None:
                    continue  # listed once, no longer: the replica left its GPUs (the row stays as its record)
                if placed.created_at >= cutoff:  # placed, its load not reported yet
                    _count(used, owners, json.loads(placed.gpu_indexes_json), placed.per_device_gib, placed.owner)
                else:
                    session.delete(placed)  # never reported within the grace: that load did not happen
            for i in wanted.gpu_indexes:
                if i not in device_gib or used.get(i, 0.0) + wanted.per_device_gib > device_gib[i] + EPSILON_GIB:
                    session.rollback()
                    return False
                if owners.get(i, set()) - {wanted.owner}:
                    session.rollback()
                    return False  # held across a tenant boundary
            session.add(
                GpuReservationRow(
                    replica_id=wanted.replica_id,
                    node_id=wanted.node_id,
                    model=wanted.model,
                    gpu_indexes_json=json.dumps(list(wanted.gpu_indexes)),
                    per_device_gib=wanted.per_device_gib,
                    owner=wanted.owner,
                    pool_id=wanted.pool_id,
                )
            )
            session.commit()
            return True

    def release(self, replica_id: str) -> None:
        """The replica is gone (unloaded, given up, its node lost); idempotent."""
        with Session(self._engine) as session:
            session.execute(delete(GpuReservationRow).where(col(GpuReservationRow.replica_id) == replica_id))
            session.commit()

    def list(self, node_id: str | None = None) -> builtins.list[Reservation]:
        with Session(self._engine) as session:
            query = select(GpuReservationRow)
            if node_id is not None:
                query = query.where(GpuReservationRow.node_id == node_id)
            return [_reservation(r) for r in session.exec(query.order_by(col(GpuReservationRow.replica_id)))]


def _count(
    used: dict[int, float], owners: dict[int, set[str | None]], devices: list[int], share: float, owner: str | None
) -> None:
    for i in devices:
        used[i] = used.get(i, 0.0) + share
        owners.setdefault(i, set()).add(owner)


def _reservation(row: GpuReservationRow) -> Reservation:
    return Reservation(
        row.replica_id,
        row.node_id,
        row.model,
        tuple(json.loads(row.gpu_indexes_json)),
        row.per_device_gib,
        row.owner,
        row.pool_id,
        row.created_at,
        row.reported_at,
    )
