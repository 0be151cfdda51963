"""Live pages: one server-sent stream tells an open Overview, Fleet or Models page when to fetch its panel again.

The stream sends a `pulse` every PULSE_EVERY_S carrying a version of what those pages show (the fleet's
nodes, GPUs and replicas, the models' policies and plans, the newest event, the newest fleet sample in the store, and a clock that ticks every
REFRESH_AT_LEAST_S so that "idle 40 s" and "3 s ago" move on); the page's script fetches its panel
when the version changes, and says how long ago it last heard from the server, so a page that has lost
the stream says so instead of showing stale figures as if they were live. A revoked key ends the stream
within KEY_RECHECK_S.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from sse_starlette import EventSourceResponse, ServerSentEvent

from sdk.wire.events import REVOKED_EVENT

from ..api.services import Services, services
from ..store import Store
from .fleet_history import FleetHistory
from .session_auth import signed_in

router = APIRouter(include_in_schema=False)

PULSE_EVENT = "pulse"
PULSE_EVERY_S = 2.0
REFRESH_AT_LEAST_S = 15
KEY_RECHECK_S = 5.0
PING_INTERVAL_S = 15


@router.get("/ui/pulse")
async def pulse(request: Request, svc: Annotated[Services, Depends(services)]) -> EventSourceResponse:
    viewer = await signed_in(request)
    history: FleetHistory | None = getattr(request.app.state, "fleet_history", None)
    return EventSourceResponse(pulses(svc, viewer.principal.key_id, history), ping=PING_INTERVAL_S)


async def pulses(svc: Services, key_id: str, history: FleetHistory | None) -> AsyncIterator[ServerSentEvent]:
    key_checked = time.monotonic()
    while True:
        if time.monotonic() - key_checked >= KEY_RECHECK_S:
            if not await svc.db(svc.store.keys.is_live, key_id):
                yield ServerSentEvent(data=json.dumps({"error": "the API key was revoked"}), event=REVOKED_EVENT)
                return
            key_checked = time.monotonic()
        version = await _shared_version(svc, history)
        yield ServerSentEvent(data=json.dumps({"version": version}), event=PULSE_EVENT)
        await asyncio.sleep(PULSE_EVERY_S)


# The digest every open live page of this process was last sent, and when: N operators' pages read the fleet once
# per pulse between them, not N times.
_last_version: tuple[float, int, int, str] | None = None  # (when, which store, newest sample, digest)


async def _shared_version(svc: Services, history: FleetHistory | None) -> str:
    global _last_version
    now, store = time.monotonic(), id(svc.store)
    last = _last_version
    if last is None or now - last[0] >= PULSE_EVERY_S / 2 or last[1] != store:
        samples = await svc.db(history.latest) if history is not None else 0
        last = _last_version = (now, store, samples, await svc.db(fleet_version, svc.store, samples))
    return last[3]


def fleet_version(store: Store, samples: int, now: float | None = None) -> str:
    """A digest of what the live pages show: it changes when any of it does (heartbeat times aside)."""
    nodes = [
        (
            n.node_id,
            n.status,
            n.preempt_by and n.preempt_by.isoformat(),
            [(g.index, g.healthy, g.memory_used_mib, g.utilization_pct) for g in n.gpus],
            [(w.model, w.size_bytes) for w in n.cached_weights],
            [(r.replica_id, r.state, r.active_leases, r.outstanding_tokens) for r in n.replicas],
        )
        for n in store.fleet.list()
    ]
    models = [
        (m.entry.name, m.policy.model_dump_json(), m.foresight and m.foresight.updated_at.isoformat())
        for m in store.models.list()
    ]
    clock = int((time.time() if now is None else now) // REFRESH_AT_LEAST_S)
    seen = json.dumps([nodes, models, store.events.newest_seq(), samples, clock], default=str)
    return hashlib.blake2b(seen.encode(), digest_size=8).hexdigest()
