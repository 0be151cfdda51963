"""Is a node gone? Evidence about the node itself, never one late pickup or one quiet heartbeat.

A step's Temporal timeouts (a call not picked up in time, a generation's heartbeats gone quiet) say only that
something is slow: on a busy machine a healthy node is late too, and taking it for lost cuts its generations
and turns load into retries. So the workflow asks here before it gives a step up, and this answers from what
the node itself shows:

- its process: a TCP connect to the port it serves peers on is answered by the kernel even while the process
  is too busy to run (alive), and refused the moment the process is dead (gone);
- its heartbeats to the control plane: recent ones say alive; the store's verdict (lost after a silence heard
  by a listening API, revoked, removed) says gone.

What neither settles is `unknown` (a silent node without a peer port, a probe that timed out): the workflow
treats it as gone for a generation, whose heartbeats already stopped, and waits once more for a pickup.
"""

from __future__ import annotations

import socket
from datetime import datetime, timedelta

from sqlalchemy.engine import Engine
from sqlmodel import Session

from sdk.wire.lease import NodeLiveness

from ..store.tables import NodeRow, utcnow

# Heard from within this long: alive. Nodes beat every few seconds (2 s under `berth up`, 5 s by default).
HEARD_WITHIN = timedelta(seconds=12)
PROBE_TIMEOUT_S = 1.0


def node_liveness(engine: Engine, node_id: str, now: datetime | None = None) -> NodeLiveness:
    """The evidence about `node_id`, strongest first: the store's verdict, its process, its heartbeats."""
    with Session(engine) as session:
        row = session.get(NodeRow, node_id)
    if row is None:
        return NodeLiveness(verdict="gone", detail=f"node {node_id} is no longer in the fleet")
    if row.admission == "revoked" or row.lost:
        return NodeLiveness(verdict="gone", detail=f"node {node_id} is {row.status}")
    if row.peer_port:
        probed = _probe(row.peer_host or "127.0.0.1", row.peer_port)
        if probed is not None:
            return probed
    heard = (now or utcnow()) - row.seen_at
    if heard <= HEARD_WITHIN:
        return NodeLiveness(verdict="alive", detail=f"heard from {heard.total_seconds():.1f}s ago")
    return NodeLiveness(verdict="unknown", detail=f"silent for {heard.total_seconds():.1f}s")


def _probe(host: str, port: int) -> NodeLiveness | None:
    """Connect to the node's port: the kernel answers for a live process however busy, and refuses for a dead
    one. None when the probe proves nothing (a timeout: a far or partitioned host)."""
    try:
        with socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S):
            return NodeLiveness(verdict="alive", detail=f"its process accepts connections on {host}:{port}")
    except ConnectionRefusedError:
        return NodeLiveness(verdict="gone", detail=f"its process refused a connection on {host}:{port}")
    except OSError:
        return None
