"""Replicas over time, for the overview's chart: the fleet table holds only the present.

The server samples the replica table every SAMPLE_EVERY_S and keeps the last hour in memory.
Each API server keeps its own (they read the same table, so they draw the same line), and a
restarted server starts a new line: a chart of the last hour needs no more.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter, deque
from datetime import datetime, timedelta, timezone

from starlette.concurrency import run_in_threadpool

from ..store import Store

log = logging.getLogger("berth.ui")

SAMPLE_EVERY_S = 15.0
KEPT_FOR = timedelta(hours=1)


class FleetHistory:
    """(time, replicas by state) samples of the last hour, oldest first."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.samples: deque[tuple[datetime, Counter[str]]] = deque(maxlen=int(KEPT_FOR.total_seconds() / SAMPLE_EVERY_S) + 1)

    def sample(self) -> None:
        states = Counter(r.state for r in self.store.fleet.replicas())
        self.samples.append((datetime.now(timezone.utc), states))

    def replicas(self) -> list[tuple[datetime, float]]:
        """Replicas that can serve (warm) or soon will (loading), at each sample."""
        return [(at, float(states["warm"] + states["loading"])) for at, states in self.samples]

    async def run(self) -> None:
        """Sample until cancelled (the app's lifespan owns the task)."""
        while True:
            try:
                await run_in_threadpool(self.sample)
            except Exception:  # a chart's missing point is not worth the server: note it and go on
                log.exception("could not sample the replica table")
            await asyncio.sleep(SAMPLE_EVERY_S)
