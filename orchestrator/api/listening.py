"""The API process's beat as a heartbeat listener (store/listeners.py): while it beats, nodes silent
towards it may be judged lost; while it is down, nobody's silence is held against them."""

from __future__ import annotations

import asyncio
import logging
import uuid

from starlette.concurrency import run_in_threadpool

from ..store import Store
from ..store.tables import utcnow

log = logging.getLogger("berth.api")

BEAT_EVERY_S = 1.0  # how late a lost node may be noticed, beyond the silence that makes it lost
GAP_S = 3 * BEAT_EVERY_S  # a listener silent this long itself listens anew


async def listen_for_heartbeats(store: Store) -> None:
    """Beat until cancelled (the app's lifespan owns the task). A new process is a new listener, whose span
    starts now; so does one that went unheard itself for GAP_S (frozen, starved, its store unreachable): the
    nodes' beats of that time were queued behind it, and they must land before their silence is judged."""
    listener_id, since = uuid.uuid4().hex, utcnow()
    last_beat = since
    while True:
        now = utcnow()
        if (now - last_beat).total_seconds() > GAP_S:
            since = now
        try:
            await run_in_threadpool(store.heartbeat_listeners.beat, listener_id, since, now)
            last_beat = now
        except Exception:  # a missed beat only delays judging silent nodes: note it and go on
            log.exception("could not record this API's heartbeat listening")
        await asyncio.sleep(BEAT_EVERY_S)
