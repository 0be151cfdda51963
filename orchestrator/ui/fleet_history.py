"""The fleet over time, for the charts: sampled into the store, read back over the window a page asks for.

Every API process samples the replica and node tables every SAMPLE_EVERY_S and writes the sample under its
time bucket (store/fleet_samples.py): a bucket another replica already sampled is skipped, so the samples are
one series whoever took them, they survive a restart, and every replica draws the same lines. A chart reads the
samples of its window; over a long window they are averaged into at most MAX_POINTS slices, and the caption says
so.

Utilization is what each node's heartbeat reports for its GPUs (NVML's share of time a kernel ran; a simulated
GPU reports the share of the heartbeat's interval a generation ran on it), averaged over the node's GPUs that
report it; a GPU that reports none (MIG mode) is left out, never counted as idle.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from starlette.concurrency import run_in_threadpool

from sdk.wire.fleet import UNADMITTED, GpuView

from ..api.errors import ApiError
from ..store import Store
from ..store.fleet_samples import SAMPLE_EVERY_S, FleetSample, NodeGpus
from .charts import Series, Window

log = logging.getLogger("berth.ui")

MIB_PER_GIB = 1024
# The windows a chart offers (the store keeps the longest); a page without one shows the hour.
WINDOWS = {"15m": timedelta(minutes=15), "1h": timedelta(hours=1), "6h": timedelta(hours=6), "24h": timedelta(hours=24)}
WINDOW_WORDS = {"15m": "15 min", "1h": "1 h", "6h": "6 h", "24h": "24 h"}
DEFAULT_WINDOW = "1h"
# At most this many points a series: an hour of 15 s samples is 240; a day is averaged over 6-minute slices.
MAX_POINTS = 240

__all__ = ["NodeGpus", "FleetHistory", "FleetCharts", "chart_window", "node_gpus", "downsample"]


def chart_window(name: str, now: datetime | None = None) -> Window:
    """The window a page's `window` parameter names; a name not offered is refused, naming the parameter."""
    span = WINDOWS.get(name)
    if span is None:
        raise ApiError(422, f"window: {name!r} is not one of {', '.join(WINDOWS)}", field="window")
    return Window.last(span, now)


def slice_of(window: Window) -> timedelta:
    """How long a point of a chart over `window` stands for: a sample's 15 s, or longer over a long window."""
    span = (window.end - window.start).total_seconds()
    return timedelta(seconds=max(SAMPLE_EVERY_S, math.ceil(span / MAX_POINTS / SAMPLE_EVERY_S) * SAMPLE_EVERY_S))


def downsample(
    points: Sequence[tuple[datetime, float]], window: Window, every: timedelta
) -> list[tuple[datetime, float]]:
    """`points` averaged over slices of `every` from the window's start, each at its slice's last point."""
    if every.total_seconds() <= SAMPLE_EVERY_S:
        return list(points)
    slices: dict[int, list[tuple[datetime, float]]] = defaultdict(list)
    for at, value in points:
        slices[int((at - window.start) / every)].append((at, value))
    return [(group[-1][0], sum(v for _, v in group) / len(group)) for _, group in sorted(slices.items())]


@dataclass(frozen=True)
class FleetCharts:
    """The samples of one window, as the charts read them."""

    samples: list[FleetSample]
    window: Window

    @property
    def every(self) -> timedelta:
        return slice_of(self.window)

    @property
    def averaged(self) -> str:
        """What the caption adds over a long window: "mean per 6 min"; "" when every sample is drawn."""
        minutes = self.every.total_seconds() / 60
        return "" if self.every.total_seconds() <= SAMPLE_EVERY_S else f"mean per {minutes:g} min"

    def replicas(self) -> list[Series]:
        """Replicas that serve (warm) and those that soon will (loading), at each sample."""
        return [
            Series(state, self._thin([(s.at, float(s.replicas.get(state, 0))) for s in self.samples]))
            for state in ("warm", "loading")
        ]

    def gpu_memory(self) -> list[Series]:
        """GiB of GPU memory in use on each node."""
        return self._per_node(lambda g: g.memory_used_gib)

    def gpu_utilization(self) -> list[Series]:
        """Each node's mean GPU utilization, %, as its GPUs report it."""
        return self._per_node(lambda g: g.utilization_pct)

    def node_series(self, node_id: str) -> tuple[Series, Series]:
        """One node's memory in use (GiB) and utilization (%), for its row on the Fleet page."""
        memory = [(s.at, s.nodes[node_id].memory_used_gib) for s in self.samples if node_id in s.nodes]
        busy = [
            (s.at, u)
            for s in self.samples
            if node_id in s.nodes and (u := s.nodes[node_id].utilization_pct) is not None
        ]
        return Series("memory used", self._thin(memory)), Series("utilization", self._thin(busy))

    def _per_node(self, read: Callable[[NodeGpus], float | None]) -> list[Series]:
        names = sorted({node for s in self.samples for node in s.nodes})
        return [
            Series(
                node,
                self._thin(
                    [(s.at, v) for s in self.samples if node in s.nodes and (v := read(s.nodes[node])) is not None]
                ),
            )
            for node in names
        ]

    def thin(self, series: Series) -> Series:
        """Another chart's series (the tokens a minute) over this window's slices."""
        return Series(series.name, self._thin(list(series.points)))

    def _thin(self, points: list[tuple[datetime, float]]) -> list[tuple[datetime, float]]:
        return downsample(points, self.window, self.every)


class FleetHistory:
    """Takes the fleet's samples into the store, and reads them back for a window."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.samples = store.fleet_samples

    def sample(self, now: datetime | None = None) -> bool:
        """Sample the fleet now; False when this bucket was sampled already (by another replica)."""
        replicas: Counter[str] = Counter(r.state for r in self.store.fleet.replicas())
        nodes = {
            n.node_id: node_gpus(n.gpus)
            for n in self.store.fleet.list()
            if n.status != "lost" and n.status not in UNADMITTED and n.gpus
        }
        return self.samples.record(FleetSample(now or datetime.now(UTC), dict(replicas), nodes))

    def charts(self, window: Window) -> FleetCharts:
        return FleetCharts(self.samples.between(window.start, window.end), window)

    def latest(self) -> int:
        """The newest sample's bucket: it moves on when there is a new point to draw."""
        return self.samples.latest_bucket()

    async def run(self) -> None:
        """Sample until cancelled (the app's lifespan owns the task)."""
        while True:
            try:
                await run_in_threadpool(self.sample)
            except Exception:  # a chart's missing point is not worth the server: note it and go on
                log.exception("could not sample the fleet tables")
            # To the next bucket's start: every sample falls in a bucket of its own, and replicas race for the same one.
            await asyncio.sleep(SAMPLE_EVERY_S - time.time() % SAMPLE_EVERY_S + 0.05)


def node_gpus(gpus: Sequence[GpuView]) -> NodeGpus:
    used = sum(g.memory_used_mib or 0 for g in gpus) / MIB_PER_GIB
    total = sum(g.memory_total_mib or 0 for g in gpus) / MIB_PER_GIB
    readings = [g.utilization_pct for g in gpus if g.utilization_pct is not None]
    return NodeGpus(round(used, 2), round(total, 2), sum(readings) / len(readings) if readings else None)
