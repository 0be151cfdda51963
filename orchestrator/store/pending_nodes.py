"""The nodes waiting for approval: a bounded list whose places free by themselves.

Only the cluster join token leaves a node `pending` (a per-node token admits it at once), so this list is the
cluster token's, and a leaked copy of it could once fill it for good: 256 rogue nodes in 12 s, then every
legitimate join refused until an operator cleaned up. Two rules bound what such a copy can hold:
- at most `max_nodes` wait at once; a join past it is refused with when the next place frees (`PendingListFull`);
- a node waiting longer than `ttl_s` from its first join is dropped, and its place with it. Its agent joins
  again if the token still works, at the back of the list, so rotating a leaked token empties the rogue's
  places within `ttl_s` while the nodes that hold the new token take them.
Dropping happens where the list is read (a join, the fleet's listing), in that transaction: no timer to run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy import delete, func, update
from sqlmodel import Session, col, select

from sdk import Conflict

from .tables import NodeGpuRow, NodeRow, NodeWeightsRow, ReplicaRow

# The advisory lock's key on PostgreSQL: the list's own, any 64-bit number no other lock of Berth's uses.
PENDING_LIST_LOCK = 0x62657274685F706E  # "berth_pn"


@dataclass(frozen=True)
class PendingRoom:
    """How many nodes may wait for approval at once, and for how long (config `pending_nodes_max`,
    `pending_node_ttl_s`; these defaults are the config's)."""

    max_nodes: int = 64
    ttl_s: float = 3600.0


DEFAULT_ROOM = PendingRoom()


class PendingListFull(Conflict):
    """A cluster-token join found every place taken: it may retry in `retry_after_s`, when the oldest is dropped."""

    def __init__(self, waiting: int, room: PendingRoom, frees_at: datetime, now: datetime) -> None:
        self.retry_after_s = max(1, math.ceil((frees_at - now).total_seconds()))
        super().__init__(
            f"{waiting} nodes that joined with the cluster join token already wait for approval, its cap"
            f" (pending_nodes_max {room.max_nodes}); the next place frees at {frees_at.isoformat(timespec='seconds')}"
            f" (in {self.retry_after_s} s), when the oldest has waited pending_node_ttl_s ({room.ttl_s:.0f} s),"
            " or sooner if an operator approves or removes one (berth nodes list --status pending). A per-node"
            " token (berth nodes admit NODE_ID) admits this node now; if the cluster token leaked, rotate it",
            field="join_token",
            status_code=429,
        )


def drop_stale(session: Session, ttl_s: float, now: datetime) -> list[str]:
    """Drop every node that waited for approval past `ttl_s` (its GPUs, weights and replicas too); their ids.

    Flushed, not committed: the caller's transaction counts the places that are left."""
    cutoff = now - timedelta(seconds=ttl_s)
    stale = list(
        session.exec(
            select(NodeRow.node_id).where(NodeRow.admission == "pending", col(NodeRow.registered_at) <= cutoff)
        ).all()
    )
    if stale:
        for table in (NodeGpuRow, NodeWeightsRow, ReplicaRow):
            session.exec(delete(table).where(col(table.node_id).in_(stale)))
        session.exec(delete(NodeRow).where(col(NodeRow.node_id).in_(stale)))
        session.flush()
    return stale


def check_room(session: Session, room: PendingRoom, now: datetime) -> None:
    """Refuse a new waiting node when `room.max_nodes` wait already (after the stale ones were dropped).

    Joins that may add a waiting node take turns from this count to their commit, else a burst of them each counts
    the list before any is written and all get in (16 racing joins put 13 in a list of 4): PostgreSQL's
    transaction-scoped advisory lock, or SQLite's one writer, taken here by a write that changes nothing."""
    if session.get_bind().dialect.name == "postgresql":
        session.exec(select(func.pg_advisory_xact_lock(PENDING_LIST_LOCK)))
    else:
        session.exec(update(NodeRow).where(sa.false()).values(admission=NodeRow.admission))
    waiting, oldest = session.exec(
        select(func.count(), func.min(NodeRow.registered_at)).where(NodeRow.admission == "pending")
    ).one()
    if waiting >= room.max_nodes:
        raise PendingListFull(waiting, room, oldest + timedelta(seconds=room.ttl_s), now)
