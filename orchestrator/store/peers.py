"""Peer copies of weights inside a datacenter: tickets, their checks and reports, disputes, measured transfers.

The protocol is in sdk/wire/peers.py; this is what the control plane keeps of it. Three rules carry the trust:
- a ticket is minted only for an admitted node (B), from an admitted, live node (A) of B's datacenter that
  reports the model in its heartbeats, and only the ticket's sha256 is stored;
- A serves a file only after the control plane says, to A authenticated as A, that this ticket is A's to
  serve, for that file, not expired, not closed (its copy was reported), and that A's claim of the model is
  still believed;
- B's report closes the ticket. A verified copy is a sample of A's rate into B. A corrupt, stalled or
  unservable one counts only on evidence the control plane saw under the ticket (peer_evidence.py), and makes
  A suspect (tried after every peer nobody reported); reports of two different nodes hold A back as a peer
  source of that model for `DISPUTE_HOLD_S`, heartbeats or not: A's claim is dropped from its reported cache at
  once (until its next heartbeat), tickets are not minted from it, and the pool counts it neither on its disk nor
  for its datacenter (pool/service.py). A lying B alone cannot take A out of service, and loses the right to
  report after reports that do not count or that others' verified copies from A refute.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import Engine, delete, func
from sqlmodel import Session, col, select

from sdk import Conflict, InvalidSpec, NotFound, Unauthorized
from sdk.wire.catalogue import ModelEntry, WeightsFile
from sdk.wire.peers import (
    PeerTicket,
    PeerTicketRequest,
    ReportAnswer,
    TicketCheck,
    TicketGrant,
    TransferReport,
    plausible_transfer,
)

from ..weights_transfer import DATACENTER_BYTES_PER_S, learned_bytes_per_s
from .fleet import NodeNotApproved, SqlFleet
from .peer_evidence import DISPUTE_HOLD_S, REPORT_STRIKES, served, standing, strikes, unevidenced
from .tables import (
    GpuReservationRow,
    NodeRow,
    NodeWeightsRow,
    PeerDisputeRow,
    PeerTicketRow,
    TransferSampleRow,
    WeightsOrderRow,
    utcnow,
)

__all__ = ["DISPUTE_HOLD_S", "SqlPeers"]
# Tickets one node may be minted per minute: a load asks for at most 3 (peer_fetch.MAX_PEERS, one per peer tried),
# and a node loads at most one replica per GPU at once (8), so 8 × 3 = 24 a minute is a busy node's most; 200
# tickets in 1.3 s (issue 34) is no load. Past it a mint is refused (429) until the minute has turned over.
TICKETS_PER_MINUTE = 30
# An operator's pre-warm may copy for an hour, as long as a ticket lives at most (sdk/wire/peers.py): a 140 GiB
# model at a congested 250 MiB/s is ~10 min.
WEIGHTS_ORDER_S = 3600.0
# Tickets, disputes and samples older than a day are swept at the next mint or report: a ticket lives an hour
# at most, and the pool's estimate has long absorbed a day-old sample (pools replay what is left after a restart).
RETAIN_S = 86_400.0
# The per-source rate that orders candidate peers is learned from that many of its latest copies.
SOURCE_SAMPLES = 20
# A page of samples the pool replays at once: a day of transfers of a large fleet fits in a few.
SAMPLE_PAGE = 10_000


class PeerTicketRefused(Unauthorized):
    """The ticket does not let this node do this (403); the message says why, the field which part."""

    def __init__(self, message: str, field: str = "ticket") -> None:
        super().__init__(message, field=field, status_code=403)


@dataclass(frozen=True)
class WritingSource:
    """Where a node serves its running steps' text (its peer server), and the key its writing tickets are
    signed with (its secret's sha256, sdk/wire/writing.py)."""

    node_id: str
    url: str
    key: str


@dataclass(frozen=True)
class MeasuredTransfer:
    """One sample as the pool replays it."""

    id: int
    node_id: str
    tier: str  # "disk", "origin", "datacenter"
    source_node: str | None
    bytes: int
    seconds: float


def ticket_hash(ticket: str) -> str:
    return hashlib.sha256(ticket.encode()).hexdigest()


class SqlPeers:
    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def writing_source(self, node_id: str) -> WritingSource | None:
        """Where to follow node `node_id`'s generations; None for a node without a peer server, or revoked."""
        with Session(self._engine) as session:
            row = session.get(NodeRow, node_id)
            if row is None or row.peer_port is None or row.admission == "revoked" or not row.secret_sha256:
                return None
            return WritingSource(node_id, _peer_url(row), row.secret_sha256)

    # -- node B: a ticket, then the report --------------------------------------------------------

    def mint(
        self,
        dest_node: str,
        node_secret: str | None,
        req: PeerTicketRequest,
        entry: ModelEntry | None,
        now: datetime | None = None,
    ) -> PeerTicket:
        """A ticket for `dest_node` to copy `req.model` from the best peer of its datacenter.

        Refuses: the model without real weights (field model), a model whose engine the node does not run or that
        no load placed on it (403, field model: it would never load it), more than `TICKETS_PER_MINUTE` (429), no
        peer to copy from (404).
        """
        now = now or utcnow()
        with Session(self._engine) as session:
            dest = _admitted(session, dest_node, node_secret)
            if entry is None or entry.weights is None:
                raise InvalidSpec(f"model {req.model!r} has no real weights in the catalogue to copy", field="model")
            engines = json.loads(dest.spec_json).get("engines") or []
            if engines and entry.engine not in engines:
                raise PeerTicketRefused(
                    f"node {dest_node!r} runs {', '.join(engines)}, not {entry.engine}, the engine of {req.model!r}:"
                    " it never loads that model, so it copies none of its weights",
                    field="model",
                )
            if not _placed(session, dest_node, req.model, now):
                raise PeerTicketRefused(
                    f"no load of {req.model!r} is placed on node {dest_node!r} (no replica of it started there, no"
                    " pre-warm ordered): a node copies only the weights it was asked to load",
                    field="model",
                )
            minted = session.exec(
                select(func.count())
                .select_from(PeerTicketRow)
                .where(
                    PeerTicketRow.dest_node == dest_node,
                    col(PeerTicketRow.created_at) > now - timedelta(seconds=60),
                )
            ).one()
            if minted >= TICKETS_PER_MINUTE:
                raise Conflict(
                    f"node {dest_node!r} was minted {minted} peer tickets in the last minute, its limit"
                    f" ({TICKETS_PER_MINUTE}); a load needs at most 3: ask again within a minute",
                    field="model",
                    status_code=429,
                )
            source = self._best_source(session, dest, req, now)
            if source is None:
                raise NotFound(
                    f"no peer in datacenter {dest.datacenter!r} serves the weights of {req.model!r}",
                    field="model",
                    status_code=404,
                )
            ticket = secrets.token_urlsafe(32)
            expires = now + timedelta(seconds=req.ttl_s)
            files = entry.weights.files
            session.add(
                PeerTicketRow(
                    ticket_sha256=ticket_hash(ticket),
                    source_node=source.node_id,
                    dest_node=dest_node,
                    model=req.model,
                    created_at=now,
                    expires_at=expires,
                    files_json=json.dumps([f.model_dump() for f in files]),
                )
            )
            _sweep(session, now)
            session.commit()
            return PeerTicket(
                ticket=ticket,
                source_node=source.node_id,
                peer_url=_peer_url(source),
                model=req.model,
                files=files,
                expires_at=expires,
            )

    def report(
        self, dest_node: str, node_secret: str | None, rep: TransferReport, now: datetime | None = None
    ) -> ReportAnswer:
        """Close the ticket with how its copy went (see the module's docstring for what follows)."""
        now = now or utcnow()
        with Session(self._engine) as session:
            _admitted(session, dest_node, node_secret)
            row = session.get(PeerTicketRow, ticket_hash(rep.ticket))
            if row is None or row.dest_node != dest_node:
                raise PeerTicketRefused("this node holds no such ticket")
            if row.closed_at is not None:
                raise Conflict(
                    f"the copy under this ticket was reported already ({row.outcome})", field="ticket", status_code=409
                )
            files = _files(row)
            total = sum(f.size_bytes for f in files)
            if rep.bytes > total:
                raise InvalidSpec(
                    f"the ticket's files hold {total} bytes; {rep.bytes} cannot have been copied", field="bytes"
                )
            if rep.sha256 is not None and rep.sha256 not in {f.sha256 for f in files}:
                raise InvalidSpec("not a file of the ticket's model", field="sha256")
            row.closed_at, row.outcome = now, rep.outcome
            session.add(row)
            sampled = disputed = held = False
            if rep.outcome == "verified":
                row.evidenced = bool(served(row))  # only a copy the source was asked for refutes a report
                sampled = plausible_transfer(rep.bytes, rep.seconds)
                if sampled:
                    session.add(
                        TransferSampleRow(
                            node_id=dest_node,
                            tier="datacenter",
                            source_node=row.source_node,
                            bytes=rep.bytes,
                            seconds=rep.seconds,
                            at=now,
                        )
                    )
            else:
                # A reporter's strikes are counted before this report: its first uncounted report is one strike.
                why_not = unevidenced(rep, row)
                if why_not is None and strikes(session, dest_node, now) >= REPORT_STRIKES:
                    why_not = "this node's recent reports did not count or were refuted: it may not report for now"
                row.evidenced = disputed = why_not is None
                if disputed:
                    session.add(
                        PeerDisputeRow(
                            node_id=row.source_node,
                            model=row.model,
                            reported_by=dest_node,
                            outcome=rep.outcome,
                            reason=rep.reason,
                            at=now,
                        )
                    )
                    session.flush()
                    _, held = standing(session, row.source_node, row.model, now)
                if held:
                    session.exec(
                        delete(NodeWeightsRow).where(
                            col(NodeWeightsRow.node_id) == row.source_node, col(NodeWeightsRow.model) == row.model
                        )
                    )
                session.add(row)
            _sweep(session, now)
            session.commit()
            return ReportAnswer(
                recorded_sample=sampled,
                disputed=disputed,
                held_back=held,
                not_counted=None if rep.outcome == "verified" or disputed else why_not,
            )

    def order_weights(self, node_id: str, model: str, now: datetime | None = None) -> None:
        """Record an operator's pre-warm of `model` onto `node_id`: it may be minted tickets for an hour."""
        now = now or utcnow()
        with Session(self._engine) as session:
            session.add(WeightsOrderRow(node_id=node_id, model=model, until=now + timedelta(seconds=WEIGHTS_ORDER_S)))
            session.exec(delete(WeightsOrderRow).where(col(WeightsOrderRow.until) < now))
            session.commit()

    # -- node A: may it serve this file to this ticket? -------------------------------------------

    def check(
        self, source_node: str, node_secret: str | None, chk: TicketCheck, now: datetime | None = None
    ) -> TicketGrant:
        """Let `source_node` serve file `chk.sha256` to the ticket's holder, or refuse (403) saying why."""
        now = now or utcnow()
        with Session(self._engine) as session:
            _admitted(session, source_node, node_secret)
            row = session.get(PeerTicketRow, ticket_hash(chk.ticket))
            if row is None:
                raise PeerTicketRefused("unknown ticket")
            if row.source_node != source_node:
                raise PeerTicketRefused("the ticket is for another source node")
            if row.closed_at is not None:
                raise PeerTicketRefused(f"the ticket is used up: its copy was reported ({row.outcome})")
            if row.expires_at <= now:
                raise PeerTicketRefused(f"the ticket expired at {row.expires_at.isoformat()}")
            file = next((f for f in _files(row) if f.sha256 == chk.sha256), None)
            if file is None:
                raise PeerTicketRefused(f"not a file of {row.model!r}, the ticket's model", field="sha256")
            dest = session.get(NodeRow, row.dest_node)
            if dest is None or dest.admission != "admitted":
                raise PeerTicketRefused(f"node {row.dest_node!r}, the ticket's holder, is no longer admitted")
            if not _claims(session, source_node, row.model) or standing(session, source_node, row.model, now)[1]:
                raise PeerTicketRefused(f"the control plane no longer believes this node holds {row.model!r}")
            asked = served(row)
            if chk.sha256 not in asked:  # the evidence a later report of this copy is judged by
                row.served_json = json.dumps(sorted(asked | {chk.sha256}))
                session.add(row)
                session.commit()
            return TicketGrant(dest_node=row.dest_node, model=row.model, file=file, expires_at=row.expires_at)

    # -- what the pool reads (heartbeats write their own samples: fleet.py) -----------------------------------------------

    def samples_after(self, last_id: int, limit: int = SAMPLE_PAGE) -> list[MeasuredTransfer]:
        """Samples with an id past `last_id`, oldest first: the pool replays them in order."""
        with Session(self._engine) as session:
            rows = session.exec(
                select(TransferSampleRow)
                .where(col(TransferSampleRow.id) > last_id)
                .order_by(col(TransferSampleRow.id))
                .limit(limit)
            ).all()
            return [MeasuredTransfer(r.id or 0, r.node_id, r.tier, r.source_node, r.bytes, r.seconds) for r in rows]

    def disputed(self, now: datetime | None = None) -> set[tuple[str, str]]:
        """(node, model) pairs held back as peer sources now (reported by enough nodes, none refuted)."""
        now = now or utcnow()
        cutoff = now - timedelta(seconds=DISPUTE_HOLD_S)
        with Session(self._engine) as session:
            rows = session.exec(
                select(PeerDisputeRow.node_id, PeerDisputeRow.model).where(col(PeerDisputeRow.at) > cutoff)
            ).all()
            return {(node, model) for node, model in set(rows) if standing(session, node, model, now)[1]}

    # -- internals --------------------------------------------------------------------------------

    def _best_source(self, session: Session, dest: NodeRow, req: PeerTicketRequest, now: datetime) -> NodeRow | None:
        """The admitted, live peer of `dest`'s datacenter that reports the model and is not held back by a dispute:
        the least reported, then the fastest by its measured copies (unmeasured: the configured datacenter rate);
        ties by id."""
        rows = session.exec(
            select(NodeRow)
            .join(NodeWeightsRow, col(NodeWeightsRow.node_id) == col(NodeRow.node_id))
            .where(
                col(NodeRow.datacenter) == dest.datacenter,
                col(NodeRow.node_id) != dest.node_id,
                col(NodeRow.admission) == "admitted",
                col(NodeRow.lost).is_(False),
                col(NodeRow.peer_port).is_not(None),
                col(NodeWeightsRow.model) == req.model,
            )
        ).all()
        excluded = set(req.exclude_nodes)
        reported = {r.node_id: standing(session, r.node_id, req.model, now) for r in rows}
        candidates = [
            r
            for r in rows
            if r.node_id not in excluded and r.status in ("healthy", "draining") and not reported[r.node_id][1]
        ]
        if not candidates:
            return None
        return min(candidates, key=lambda r: (reported[r.node_id][0], -_source_rate(session, r.node_id), r.node_id))


def _admitted(session: Session, node_id: str, node_secret: str | None) -> NodeRow:
    row = SqlFleet._authenticated(session, node_id, node_secret)
    if row.admission == "pending":
        raise NodeNotApproved(node_id)
    return row


def _placed(session: Session, node_id: str, model: str, now: datetime) -> bool:
    """A load of `model` is placed on the node: a pool's replica reservation there, or an operator's pre-warm."""
    reserved = session.exec(
        select(GpuReservationRow.replica_id).where(
            GpuReservationRow.node_id == node_id, GpuReservationRow.model == model
        )
    ).first()
    ordered = session.exec(
        select(WeightsOrderRow.id).where(
            WeightsOrderRow.node_id == node_id, WeightsOrderRow.model == model, col(WeightsOrderRow.until) > now
        )
    ).first()
    return reserved is not None or ordered is not None


def _files(row: PeerTicketRow) -> list[WeightsFile]:
    return [WeightsFile.model_validate(f) for f in json.loads(row.files_json)]


def _claims(session: Session, node_id: str, model: str) -> bool:
    return (
        session.exec(
            select(NodeWeightsRow.id).where(NodeWeightsRow.node_id == node_id, NodeWeightsRow.model == model)
        ).first()
        is not None
    )


def _source_rate(session: Session, node_id: str) -> float:
    rows = session.exec(
        select(TransferSampleRow)
        .where(TransferSampleRow.source_node == node_id)
        .order_by(col(TransferSampleRow.id).desc())
        .limit(SOURCE_SAMPLES)
    ).all()
    rate = DATACENTER_BYTES_PER_S
    for r in reversed(rows):
        rate = learned_bytes_per_s(rate, r.bytes, r.seconds)
    return rate


def _peer_url(row: NodeRow) -> str:
    host = row.peer_host or "127.0.0.1"
    return f"http://[{host}]:{row.peer_port}" if ":" in host else f"http://{host}:{row.peer_port}"


def _sweep(session: Session, now: datetime) -> None:
    cutoff = now - timedelta(seconds=RETAIN_S)
    session.exec(delete(PeerTicketRow).where(col(PeerTicketRow.created_at) < cutoff))
    session.exec(delete(PeerDisputeRow).where(col(PeerDisputeRow.at) < cutoff))
    session.exec(delete(TransferSampleRow).where(col(TransferSampleRow.at) < cutoff))
