"""The fleet's state: registered nodes, their GPUs, the replicas they run and the weights they cache.

Node agents are the authority on what runs on their node, so a heartbeat *replaces* the
node's GPU metrics, cached weights and replicas rather than patching them: a replica the
node stopped reporting is gone, whatever message was lost in between. The control plane is
the authority on two things only: whether an operator drained the node, and whether the
node has gone silent for too long (lost), in which case its replicas are removed at once so
that no placement is sent to a GPU nobody answers for.

A node proves it is the node that registered an id with a per-node secret the control plane
minted; only its sha256 is stored, so a copy of the database lets nobody heartbeat for a node.
Who may join at all, and how a node is approved, revoked and removed, is node_admission.py's:
a node waiting for approval (`pending`) heartbeats so that operators see its GPUs, but books no
step and is given no work; a revoked one is refused everything.
"""

from __future__ import annotations

import builtins
import hashlib
import hmac
import json
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import TypeVar

import sqlalchemy as sa
from sqlalchemy import Engine, bindparam, delete, update
from sqlalchemy.engine import Row
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from sdk import Conflict, InvalidSpec, NotFound, Unauthorized
from sdk.wire.fleet import (
    OPERATOR_LABELS,
    POOL_LABEL,
    TRUST_LABELS,
    CachedModelWeights,
    GpuView,
    NodeHeartbeat,
    NodeSpec,
    NodeStatus,
    NodeView,
    ReplicaView,
)
from sdk.wire.peers import plausible_transfer

from .connections import connected
from .listeners import silence_cutoff
from .tables import (
    GpuReservationRow,
    NodeGpuRow,
    NodeRow,
    NodeWeightsRow,
    ReplicaRow,
    TransferSampleRow,
    table_of,
    utcnow,
)


class NodeNotFound(NotFound):
    def __init__(self, node_id: str) -> None:
        super().__init__(f"node {node_id!r} is not registered", field="node_id", status_code=404)


class NodeConflict(Conflict):
    """The node id is registered by a node that holds another secret."""

    def __init__(self, node_id: str) -> None:
        super().__init__(
            f"node id {node_id!r} is already registered by another node;"
            " re-register with its node secret or pick another id",
            field="node_id",
            status_code=409,
        )


class NodeSecretRefused(Unauthorized):
    def __init__(self, node_id: str) -> None:
        super().__init__(f"the node secret of {node_id!r} is missing or wrong", field="node_id", status_code=401)


class NodeRevoked(Unauthorized):
    """The node's credential was revoked: nothing it presents works until it is admitted again."""

    def __init__(self, node_id: str) -> None:
        super().__init__(
            f"node {node_id!r} was revoked: its node secret no longer works; it must be admitted again"
            f" (berth nodes admit {node_id})",
            field="node_id",
            status_code=401,
        )


class NodeNotApproved(Unauthorized):
    """A pending node proved who it is, but is not in the fleet yet: it may heartbeat, not book steps."""

    def __init__(self, node_id: str) -> None:
        super().__init__(
            f"node {node_id!r} is not approved: it joined with the cluster token and waits for an"
            f" operator (berth nodes approve {node_id})",
            field="node_id",
            status_code=403,
        )


# A revoked node's secret hash is kept behind this mark: no secret hashes to the marked value, so it proves nothing,
# but the node that held the secret can be told it was revoked while any other caller hears only "wrong secret".
REVOKED_MARK = "revoked:"


def secret_hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def node_status(*, admission: str, lost: bool, draining: bool, gpus_healthy: bool) -> NodeStatus:
    """A node outside the fleet (revoked, or pending approval) is that whatever else holds; then lost outranks
    draining (a silent node serves nothing either way), draining outranks health."""
    if admission in ("revoked", "pending"):
        return "revoked" if admission == "revoked" else "pending"
    if lost:
        return "lost"
    if draining:
        return "draining"
    # One GPU with uncorrected ECC errors or an XID usually means the whole node needs a reset;
    # the view keeps per-GPU health for a scheduler that wants to use the healthy ones.
    return "healthy" if gpus_healthy else "unhealthy"


class SqlFleet:
    """Nodes, GPUs, replicas and weight caches on the control-plane database."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    # -- writes from node agents ------------------------------------------------------------

    def register(self, spec: NodeSpec, node_secret: str) -> NodeView:
        """Register an admitted node under `node_secret`, or re-register it (idempotent) with that secret.

        The store's primitive, for callers that vouch for the node themselves (fixtures, benchmarks): a node
        agent joins through `SqlNodeAdmission.join`, which decides whether it is let in and mints its secret.
        A reused id with another secret is refused.
        """
        now = utcnow()
        with Session(self._engine) as session:
            row = session.get(NodeRow, spec.node_id)
            if row is not None and not proves(row, node_secret):
                raise NodeConflict(spec.node_id)
            if row is None:
                row = new_node_row(spec, node_secret, "admitted", now)
            write_spec(session, row, spec, now)
            try:
                session.commit()
            except IntegrityError:  # the same new id registered concurrently, so with another fresh secret
                raise NodeConflict(spec.node_id) from None
            return node_view(session, row)

    def heartbeat(self, hb: NodeHeartbeat, node_secret: str | None) -> NodeView:
        """Record a heartbeat: metrics, cached weights and replicas replace the previous ones.

        A lost node that heartbeats again is back (its replicas come back with this report).
        Refuses, changing nothing: an unknown node, a wrong secret, a GPU index the node did
        not register.
        """
        now = utcnow()
        with Session(self._engine) as session:
            row = self._authenticated(session, hb.node_id, node_secret)
            gpus = {g.gpu_index: g for g in session.exec(select(NodeGpuRow).where(NodeGpuRow.node_id == hb.node_id))}
            _check_indexes(hb, set(gpus))
            if row.admission == "pending":  # given no work, it runs none: only its GPUs are shown, for approval
                hb = hb.model_copy(update={"cached_weights": [], "replicas": []})
            for metrics in hb.gpus:
                gpu = gpus[metrics.index]
                gpu.memory_used_mib, gpu.utilization_pct = metrics.memory_used_mib, metrics.utilization_pct
                gpu.ecc_errors, gpu.healthy, gpu.reason = metrics.ecc_errors, metrics.healthy, metrics.reason
                session.add(gpu)
            session.exec(delete(NodeWeightsRow).where(col(NodeWeightsRow.node_id) == hb.node_id))
            session.add_all(
                NodeWeightsRow(node_id=hb.node_id, model=w.model, size_bytes=w.size_bytes)
                for w in _last_per_model(hb.cached_weights)
            )
            session.exec(delete(ReplicaRow).where(col(ReplicaRow.node_id) == hb.node_id))
            session.add_all(
                ReplicaRow(
                    node_id=hb.node_id,
                    replica_id=r.replica_id,
                    model=r.model,
                    state=r.state,
                    gpu_indexes_json=json.dumps(sorted(r.gpu_indexes)),
                    outstanding_tokens=r.outstanding_tokens,
                    active_leases=r.active_leases,
                    updated_at=now,
                )
                for r in hb.replicas
            )
            if hb.replicas:  # from its first listing on, the node's report says whether a replica holds its GPUs
                session.execute(
                    update(GpuReservationRow)
                    .where(
                        col(GpuReservationRow.node_id) == hb.node_id,
                        col(GpuReservationRow.replica_id).in_([r.replica_id for r in hb.replicas]),
                        col(GpuReservationRow.reported_at).is_(None),
                    )
                    .values(reported_at=now)
                )
            row.peer_host, row.peer_port = (hb.peer_host, hb.peer_port) if hb.peer_port else (None, None)
            if row.admission == "admitted":  # its own disk and origin reads: what the pool learns rates from
                session.add_all(
                    TransferSampleRow(node_id=hb.node_id, tier=t.tier, bytes=t.bytes, seconds=t.seconds, at=now)
                    for t in hb.transfers
                    if plausible_transfer(t.bytes, t.seconds)
                )
            row.lost = False
            row.leaving = row.leaving or hb.leaving
            row.seen_at = row.last_heartbeat_at = now
            restatus(row, gpus.values())
            session.add(row)
            session.commit()
            return node_view(session, row)

    # -- writes from the control plane ------------------------------------------------------

    def mark_lost_after(self, seconds: float, now: datetime | None = None) -> builtins.list[str]:
        """Mark lost every admitted node not heard from for `seconds` while a control-plane API was up to hear
        it (see listeners.py), remove its replicas; returns their ids.

        Weights on the node's disk are kept: if the node comes back, its cache is still there. A pending or
        revoked node serves nothing to lose, and keeps the status that says why.
        """
        with Session(self._engine) as session:
            cutoff = silence_cutoff(session, seconds, now or utcnow())
            if cutoff is None:
                return []
            # One conditional UPDATE: of several control-plane replicas reaping at once, each node is reported
            # lost by exactly one, and a heartbeat that lands first keeps its node.
            marked = session.execute(
                update(NodeRow)
                .where(
                    col(NodeRow.seen_at) < cutoff, col(NodeRow.lost).is_(False), col(NodeRow.admission) == "admitted"
                )
                .values(lost=True, status="lost")
                .returning(col(NodeRow.node_id))
            ).all()
            ids = sorted(node_id for (node_id,) in marked)
            if ids:
                session.execute(delete(ReplicaRow).where(col(ReplicaRow.node_id).in_(ids)))
            session.commit()
        return ids

    def preempt(self, node_id: str, notice_s: float, now: datetime | None = None) -> NodeView:
        """Give a node a preemption notice: nothing new is placed on it, and its agent, told at its next
        heartbeat, finishes what it can and leaves by the deadline (a spot reclaim, or an operator's)."""
        with Session(self._engine) as session:
            row = session.get(NodeRow, node_id)
            if row is None:
                raise NodeNotFound(node_id)
            deadline = (now or utcnow()) + timedelta(seconds=notice_s)
            row.leaving = True
            row.preempt_by = min(row.preempt_by, deadline) if row.preempt_by else deadline
            gpus = session.exec(select(NodeGpuRow).where(NodeGpuRow.node_id == node_id)).all()
            restatus(row, gpus)
            session.add(row)
            session.commit()
            return node_view(session, row)

    def set_trust(self, node_id: str, labels: dict[str, str]) -> NodeView:
        """An operator's trust labels for the node (`TRUST_LABELS` only), replacing those set before.

        Placement reads a node's trust boundary from these alone: the labels a node registers itself are its own
        word, and a node admitted for one purpose must not make itself a tenant's by naming it."""
        unknown = sorted(set(labels) - TRUST_LABELS)
        if unknown:
            raise InvalidSpec(
                f"{unknown[0]!r} is not a trust label ({', '.join(sorted(TRUST_LABELS))})", field="labels"
            )
        with Session(self._engine) as session:
            row = session.get(NodeRow, node_id)
            if row is None:
                raise NodeNotFound(node_id)
            row.trust_labels_json = json.dumps(dict(sorted(labels.items())))
            session.add(row)
            session.commit()
            return node_view(session, row)

    def drain(self, node_id: str) -> NodeView:
        """Stop placing new work on the node; what runs there finishes (the node drains its replicas)."""
        return self._set_draining(node_id, True)

    def undrain(self, node_id: str) -> NodeView:
        return self._set_draining(node_id, False)

    def authenticate(self, node_id: str, node_secret: str | None) -> None:
        """Check a node's secret before it writes through the control plane (its steps' bookkeeping).

        Raises NodeNotFound for an id never registered; NodeRevoked (401) for a revoked node, NodeSecretRefused
        (401) for a missing or wrong secret; NodeNotApproved (403) for a pending node, which proved who it is
        but is not in the fleet.
        """
        with connected(self._engine) as connection:
            found = connection.execute(_CREDENTIALS, {"node_id": node_id}).first()
        row = _check_credentials(node_id, found, node_secret)
        if row.admission == "pending":
            raise NodeNotApproved(node_id)

    # -- reads --------------------------------------------------------------------------------

    def get(self, node_id: str) -> NodeView | None:
        with Session(self._engine) as session:
            row = session.get(NodeRow, node_id)
            return node_view(session, row) if row is not None else None

    def list(self, status: str | None = None, datacenter: str | None = None) -> builtins.list[NodeView]:
        """Every node by id, optionally only those with one status or in one datacenter."""
        query = select(NodeRow).order_by(col(NodeRow.node_id))
        if status is not None:
            query = query.where(NodeRow.status == status)
        if datacenter is not None:
            query = query.where(NodeRow.datacenter == datacenter)
        with Session(self._engine) as session:
            return [node_view(session, row) for row in session.exec(query).all()]

    def replicas(self, model: str | None = None) -> builtins.list[ReplicaView]:
        """Every replica on the fleet (of one model when given), by node then model."""
        started = (
            (col(GpuReservationRow.replica_id) == col(ReplicaRow.replica_id))
            & (col(GpuReservationRow.node_id) == col(ReplicaRow.node_id))
            & (col(GpuReservationRow.model) == col(ReplicaRow.model))
        )
        query = (
            select(ReplicaRow, NodeRow, GpuReservationRow.replica_id)
            .where(ReplicaRow.node_id == NodeRow.node_id)
            .outerjoin(GpuReservationRow, started)
        )
        if model is not None:
            query = query.where(ReplicaRow.model == model)
        query = query.order_by(col(ReplicaRow.node_id), col(ReplicaRow.model), col(ReplicaRow.id))
        with Session(self._engine) as session:
            return [_replica_view(r, _spec(n), proven=p is not None) for r, n, p in session.exec(query).all()]

    # -- helpers ------------------------------------------------------------------------------

    def _set_draining(self, node_id: str, draining: bool) -> NodeView:
        with Session(self._engine) as session:
            row = session.get(NodeRow, node_id)
            if row is None:
                raise NodeNotFound(node_id)
            gpus = session.exec(select(NodeGpuRow).where(NodeGpuRow.node_id == node_id)).all()
            row.draining = draining
            restatus(row, gpus)
            session.add(row)
            session.commit()
            return node_view(session, row)

    @staticmethod
    def _authenticated(session: Session, node_id: str, node_secret: str | None) -> NodeRow:
        return _check_credentials(node_id, session.get(NodeRow, node_id), node_secret)


# What a node's every step bookkeeping call is checked against, built once: its admission and secret hash.
_NODES = table_of(NodeRow)
_CREDENTIALS = sa.select(_NODES.c.admission, _NODES.c.secret_sha256).where(_NODES.c.node_id == bindparam("node_id"))
# What a node's credentials are read as: its whole row, or just those two columns.
_Credentials = TypeVar("_Credentials", NodeRow, Row)


def _check_credentials(node_id: str, row: _Credentials | None, node_secret: str | None) -> _Credentials:
    """The row, once `node_secret` proved it; else NodeSecretRefused (401), the same for an id never registered
    as for a known one, so a caller without the node's secret cannot map which ids exist. Only the holder of a
    revoked node's former secret is told it was revoked (NodeRevoked), so its agent stops instead of rejoining."""
    if row is not None and proves(row, node_secret):
        return row
    if row is not None and held_before_revocation(row, node_secret):
        raise NodeRevoked(node_id)
    raise NodeSecretRefused(node_id)


def proves(row: NodeRow | Row, node_secret: str | None) -> bool:
    """Does `node_secret` prove the caller is the node of `row`? Never for a revoked one (its hash is marked)."""
    return (
        bool(node_secret)
        and bool(row.secret_sha256)
        and hmac.compare_digest(row.secret_sha256, secret_hash(node_secret or ""))
    )


def held_before_revocation(row: NodeRow | Row, node_secret: str | None) -> bool:
    """Was `node_secret` the secret of the node `row`, revoked since? (Its hash is kept behind REVOKED_MARK.)"""
    return (
        bool(node_secret)
        and row.secret_sha256.startswith(REVOKED_MARK)
        and hmac.compare_digest(row.secret_sha256, REVOKED_MARK + secret_hash(node_secret or ""))
    )


def new_node_row(spec: NodeSpec, node_secret: str, admission: str, now: datetime) -> NodeRow:
    return NodeRow(
        node_id=spec.node_id,
        status="pending",
        admission=admission,
        datacenter=spec.datacenter,
        spec_json="",
        secret_sha256=secret_hash(node_secret),
        registered_at=now,
    )


def write_spec(session: Session, row: NodeRow, spec: NodeSpec, now: datetime) -> None:
    """Write a (re-)registration: the spec replaces the old one (the node may have a new GPU or a new price), the
    metrics of GPUs still present are kept, and the node is alive and staying; its status follows."""
    row.spec_json = spec.model_dump_json(exclude={"gpus"})
    row.datacenter = spec.datacenter
    row.seen_at = now
    old = {g.gpu_index: g for g in session.exec(select(NodeGpuRow).where(NodeGpuRow.node_id == spec.node_id))}
    kept: builtins.list[NodeGpuRow] = []
    for gpu in spec.gpus:
        gpu_row = old.pop(gpu.index, None) or NodeGpuRow(
            node_id=spec.node_id, gpu_index=gpu.index, type_name="", description_json=""
        )
        gpu_row.type_name = gpu.type_name
        gpu_row.description_json = gpu.model_dump_json()
        session.add(gpu_row)
        kept.append(gpu_row)
    for gone in old.values():
        session.delete(gone)
    if old:  # a GPU left the node: replicas on it are gone; the next heartbeat reports the rest
        session.exec(delete(ReplicaRow).where(col(ReplicaRow.node_id) == spec.node_id))
    row.lost = row.leaving = False  # a node that registers is alive and staying
    row.preempt_by = None
    restatus(row, kept)
    session.add(row)


def restatus(row: NodeRow, gpus: Iterable[NodeGpuRow]) -> None:
    """Derive the row's status again from its admission, its flags and its GPUs' health."""
    row.status = node_status(
        admission=row.admission,
        lost=row.lost,
        draining=row.draining or row.leaving,
        gpus_healthy=all(g.healthy for g in gpus),
    )


def node_view(session: Session, row: NodeRow) -> NodeView:
    spec = _spec(row)
    gpus = session.exec(
        select(NodeGpuRow).where(NodeGpuRow.node_id == row.node_id).order_by(col(NodeGpuRow.gpu_index))
    ).all()
    weights = session.exec(
        select(NodeWeightsRow).where(NodeWeightsRow.node_id == row.node_id).order_by(col(NodeWeightsRow.model))
    ).all()
    replicas = session.exec(
        select(ReplicaRow).where(ReplicaRow.node_id == row.node_id).order_by(col(ReplicaRow.model), col(ReplicaRow.id))
    ).all()
    started = {
        (r.replica_id, r.model)
        for r in session.exec(select(GpuReservationRow).where(GpuReservationRow.node_id == row.node_id)).all()
    }
    return NodeView(
        **spec.model_dump(exclude={"gpus", "labels"}),
        labels=labels_of(spec, row),
        gpus=[
            GpuView.model_validate(
                {
                    **json.loads(g.description_json),
                    "memory_used_mib": g.memory_used_mib,
                    "utilization_pct": g.utilization_pct,
                    "ecc_errors": g.ecc_errors,
                    "healthy": g.healthy,
                    "reason": g.reason,
                }
            )
            for g in gpus
        ],
        cached_weights=[CachedModelWeights(model=w.model, size_bytes=w.size_bytes) for w in weights],
        replicas=[_replica_view(r, spec, proven=(r.replica_id, r.model) in started) for r in replicas],
        status=row.status,  # a NodeStatus: written only by node_status (and validated here)
        registered_at=row.registered_at,
        last_heartbeat_at=row.last_heartbeat_at,
        preempt_by=row.preempt_by,
        pool=row.pool,
    )


def labels_of(spec: NodeSpec, row: NodeRow) -> dict[str, str]:
    """The node's labels as the fleet reads them: its own, but a trust label and its pool only as an operator set them
    (`PUT /v1/nodes/{id}/trust`, the pool token it joined with)."""
    own = {key: value for key, value in spec.labels.items() if key not in OPERATOR_LABELS}
    pool = {POOL_LABEL: row.pool} if row.pool else {}
    return {**own, **pool, **json.loads(row.trust_labels_json or "{}")}


def _spec(row: NodeRow) -> NodeSpec:
    return NodeSpec.model_validate_json(row.spec_json)


def _replica_view(row: ReplicaRow, spec: NodeSpec, proven: bool) -> ReplicaView:
    return ReplicaView(
        replica_id=row.replica_id,
        node_id=row.node_id,
        datacenter=spec.datacenter,
        zone=spec.zone,
        model=row.model,
        gpu_indexes=json.loads(row.gpu_indexes_json),
        state=row.state,
        outstanding_tokens=row.outstanding_tokens,
        active_leases=row.active_leases,
        updated_at=row.updated_at,
        proven=proven,
    )


def _check_indexes(hb: NodeHeartbeat, registered: set[int]) -> None:
    """Every GPU index a heartbeat names must be one the node registered (else nothing is written)."""
    for i, metrics in enumerate(hb.gpus):
        if metrics.index not in registered:
            raise InvalidSpec(f"GPU {metrics.index} was not registered by node {hb.node_id!r}", field=f"gpus.{i}.index")
    for i, replica in enumerate(hb.replicas):
        unknown = sorted(set(replica.gpu_indexes) - registered)
        if unknown:
            raise InvalidSpec(
                f"GPU {unknown[0]} was not registered by node {hb.node_id!r}", field=f"replicas.{i}.gpu_indexes"
            )


def _last_per_model(weights: Iterable[CachedModelWeights]) -> builtins.list[CachedModelWeights]:
    """One entry per model (the unique key): a repeated model in one report keeps its last size."""
    return builtins.list({w.model: w for w in weights}.values())
