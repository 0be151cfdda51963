"""The fleet over the last hour, for the charts: the fleet tables hold only the present.

The server samples the replica and node tables every SAMPLE_EVERY_S and keeps the last hour in memory:
replicas by state, and each live node's GPU memory and utilization as its last heartbeat reported them.
Each API server keeps its own (they read the same tables, so they draw the same lines), and a restarted
server starts new lines: a chart of the last hour needs no more.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from starlette.concurrency import run_in_threadpool

from sdk.wire.fleet import UNADMITTED, GpuView

from ..store import Store
from .charts import Series

log = logging.getLogger("berth.ui")

SAMPLE_EVERY_S = 15.0
KEPT_FOR = timedelta(hours=1)
MIB_PER_GIB = 1024


@dataclass(frozen=True)
class NodeGpus:
    """A node's GPUs at one sample: memory summed over them, utilization averaged over those that report it."""

    memory_used_gib: float
    memory_total_gib: float
    utilization_pct: float | None


@dataclass(frozen=True)
class Sample:
    at: datetime
    replicas: Counter[str]
    nodes: dict[str, NodeGpus]


class FleetHistory:
    """Samples of the last hour, oldest first."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.samples: deque[Sample] = deque(maxlen=int(KEPT_FOR.total_seconds() / SAMPLE_EVERY_S) + 1)

    def sample(self) -> None:
        replicas: Counter[str] = Counter(r.state for r in self.store.fleet.replicas())
        nodes = {
            n.node_id: node_gpus(n.gpus)
            for n in self.store.fleet.list()
            if n.status != "lost" and n.status not in UNADMITTED and n.gpus
        }
        self.samples.append(Sample(datetime.now(UTC), replicas, nodes))

    def replicas(self) -> list[Series]:
        """Replicas that serve (warm) and those that soon will (loading), at each sample."""
        return [
            Series(state, [(s.at, float(s.replicas[state])) for s in self.samples]) for state in ("warm", "loading")
        ]

    def gpu_memory(self) -> list[Series]:
        """GiB of GPU memory in use on each node."""
        return self._per_node(lambda g: g.memory_used_gib)

    def gpu_utilization(self) -> list[Series]:
        """Each node's mean GPU utilization, %."""
        return self._per_node(lambda g: g.utilization_pct)

    def node_series(self, node_id: str) -> tuple[Series, Series]:
        """One node's memory in use (GiB) and utilization (%), for its row on the Fleet page."""
        memory = [(s.at, s.nodes[node_id].memory_used_gib) for s in self.samples if node_id in s.nodes]
        busy = [
            (s.at, u)
            for s in self.samples
            if node_id in s.nodes and (u := s.nodes[node_id].utilization_pct) is not None
        ]
        return Series("memory used", memory), Series("utilization", busy)

    def _per_node(self, read: Callable[[NodeGpus], float | None]) -> list[Series]:
        names = sorted({node for s in self.samples for node in s.nodes})
        return [
            Series(
                node, [(s.at, v) for s in self.samples if node in s.nodes and (v := read(s.nodes[node])) is not None]
            )
            for node in names
        ]

    async def run(self) -> None:
        """Sample until cancelled (the app's lifespan owns the task)."""
        while True:
            try:
                await run_in_threadpool(self.sample)
            except Exception:  # a chart's missing point is not worth the server: note it and go on
                log.exception("could not sample the fleet tables")
            await asyncio.sleep(SAMPLE_EVERY_S)


def node_gpus(gpus: Sequence[GpuView]) -> NodeGpus:
    used = sum(g.memory_used_mib or 0 for g in gpus) / MIB_PER_GIB
    total = sum(g.memory_total_mib or 0 for g in gpus) / MIB_PER_GIB
    readings = [g.utilization_pct for g in gpus if g.utilization_pct is not None]
    return NodeGpus(round(used, 2), round(total, 2), sum(readings) / len(readings) if readings else None)
