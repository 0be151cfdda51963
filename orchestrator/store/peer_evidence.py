"""What a report against a peer source must show before it counts, and when counted reports hold a source back.

A node's word that a peer sent bad bytes used to take the peer out of service for 10 minutes, with no bytes
fetched, as often as it liked (issue 34): one lying node could keep the only honest holder of a model out of
peer service for good. Now:
- a report counts only on evidence the control plane saw: the source was asked, under this very ticket, for
  the file a `corrupt` report names (its ticket check, which the source makes before it sends a byte); a
  `stalled` one names a rate measured over a window of at least `MIN_STALL_WINDOW_S`; an `unservable` one
  follows a check the source made (it was reached, and then did not serve);
- a counted report only makes the source *suspect*: tried after every peer nobody reported. It is held back
  (no tickets, its claim dropped, not counted by the pool) once `CORROBORATING_REPORTERS` different nodes
  reported it within `DISPUTE_HOLD_S`, none refuted;
- a report is refuted when another node copies the same model from the same source, verified, after it; a
  reporter with `REPORT_STRIKES` reports that did not count or were refuted within `STRIKE_MEMORY_S` loses the
  right to report until they age out: its reports close their tickets and count for nothing.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta

from sqlmodel import Session, col, select

from sdk.wire.peers import TransferReport

from .tables import PeerDisputeRow, PeerTicketRow

# A disputed claim is not used for peer copies for 10 minutes: two heartbeats cannot restore it, a node that
# re-fetched its copy is a source again soon after, and 10 min is a few copies' worth of time at most.
DISPUTE_HOLD_S = 600.0
# Two nodes, not one, hold a source back: one node's word, even with a ticket it used, is one party's; a
# really bad copy is found by the next node that tries it (it is tried last meanwhile), at the cost of one copy.
CORROBORATING_REPORTERS = 2
# The shortest window a node's floor may measure a stall over (BerthConfig.weights_floor_window_s, ge=5), and
# the highest floor it may set (le=1024 MiB/s): a "stall" measured over less, or faster than that, is no stall.
MIN_STALL_WINDOW_S = 5.0
MAX_STALL_BYTES_PER_S = 1024.0 * 2**20
# Two reports that did not count or were refuted within an hour cost the reporter its right to report for what
# is left of that hour: an honest node's copies fail the hash rarely, and never twice in an hour from sources
# others then copy from without fault.
REPORT_STRIKES = 2
STRIKE_MEMORY_S = 3600.0


def served(row: PeerTicketRow) -> set[str]:
    """The files the ticket's source was asked for under it, by sha256 (its ticket checks)."""
    return set(json.loads(row.served_json)) if row.served_json else set()


def unevidenced(rep: TransferReport, row: PeerTicketRow) -> str | None:
    """Why a failure report shows nothing the control plane saw; None when it counts."""
    asked = served(row)
    if not asked:
        return "the source was never asked for a file under this ticket"
    if rep.outcome == "corrupt" and rep.sha256 not in asked:
        return "a corrupt copy names a file (sha256) the source was asked for under this ticket"
    if rep.outcome == "stalled":
        if rep.seconds < MIN_STALL_WINDOW_S:
            return f"a stall is measured over at least {MIN_STALL_WINDOW_S:g} s"
        if rep.bytes / rep.seconds >= MAX_STALL_BYTES_PER_S:
            return "the measured rate is above any floor a node may set"
    return None


def strikes(session: Session, reporter: str, now: datetime) -> int:
    """The reporter's failure reports within `STRIKE_MEMORY_S` that did not count, or that were refuted."""
    since = now - timedelta(seconds=STRIKE_MEMORY_S)
    uncounted = session.exec(
        select(PeerTicketRow.ticket_sha256).where(
            PeerTicketRow.dest_node == reporter,
            col(PeerTicketRow.evidenced).is_(False),
            col(PeerTicketRow.closed_at) > since,
        )
    ).all()
    reports = session.exec(
        select(PeerDisputeRow).where(PeerDisputeRow.reported_by == reporter, col(PeerDisputeRow.at) > since)
    ).all()
    return len(uncounted) + sum(1 for d in reports if _refuted(session, d))


def standing(session: Session, node_id: str, model: str, now: datetime) -> tuple[int, bool]:
    """(different nodes whose counted, unrefuted reports of `node_id` as a source of `model` stand within
    `DISPUTE_HOLD_S`; whether that holds it back)."""
    since = now - timedelta(seconds=DISPUTE_HOLD_S)
    reports = session.exec(
        select(PeerDisputeRow).where(
            PeerDisputeRow.node_id == node_id, PeerDisputeRow.model == model, col(PeerDisputeRow.at) > since
        )
    ).all()
    reporters = {d.reported_by for d in reports if not _refuted(session, d)}
    return len(reporters), len(reporters) >= CORROBORATING_REPORTERS


def _refuted(session: Session, report: PeerDisputeRow) -> bool:
    """Another node copied the model from the same source, verified, after the report."""
    return (
        session.exec(
            select(PeerTicketRow.ticket_sha256).where(
                PeerTicketRow.source_node == report.node_id,
                PeerTicketRow.model == report.model,
                PeerTicketRow.dest_node != report.reported_by,
                PeerTicketRow.outcome == "verified",
                col(PeerTicketRow.closed_at) > report.at,
            )
        ).first()
        is not None
    )
