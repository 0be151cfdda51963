"""How long an idle replica is kept, learned from its model's own idle gaps.

A fixed keep-alive (today's 300 s for every model) is wrong for nearly every model: one called every
few seconds holds a GPU for minutes after its last call for nothing, one called every ten minutes
falls to zero just before each call. Shahrad et al. ("Serverless in the Wild", USENIX ATC 2020)
learn each function's window from a histogram of its idle times over the last hours; Berth does the
same per model, and per *level*: the k-th replica of a model is needed while the model's demand needs
k replicas, so its idle gaps are the spans during which demand needed fewer than k, ended by demand
needing k again. Those spans are the same whatever the scaler does (demand arrives regardless of what
is warm), so the histogram never learns only what the current window lets it see.

From the histogram the window is the threshold T that minimises the expected cost of an idle span,
the ski-rental trade with a learned distribution: holding costs the replica's GPUs for min(gap, T),
and a gap longer than T costs one cold start (its load's GPU time and the waiting steps'). The
pre-warm time is the histogram's head (its 5th percentile, as in the paper): when even the shortest
gaps are long, the replica is unloaded at once and loaded again just before the head, which costs a
load's GPU time but no wait. The deterministic ski-rental rule (keep until the holding has cost one
cold start: 2-competitive whatever the gaps) is the floor and the fallback: for a level with too few
gaps, and where the histogram's cheapest threshold is shorter, since past its longest gap the
histogram is blind. So in practice the histogram decides when gaps are long and regular (a pre-warm,
or a window past the break-even) and the break-even decides the rest (`source` says which). An
operator's fixed `idle_timeout_s` wins over both.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from sdk.wire.catalogue import KeepAliveSource

# 10 s bins: the scaler ticks every 2 s, so a finer bin would only split the same tick's gaps.
BIN_S = 10.0
# A gap longer than 4 hours is "out of bounds", as in the paper: the histogram says nothing beyond it.
RANGE_S = 4 * 3600.0
SLICE_S = 3600.0
SLICES = 24  # the histogram covers the last day, in hour slices that age out whole
MIN_GAPS = 8  # fewer gaps than this at a level: the ski-rental fallback
HEAD_QUANTILE = 0.05
# Unloading at once and pre-warming before the head pays only when the head is long: a load from disk
# takes 20–45 s and costs its GPUs all the while, so a head under 10 minutes saves little and risks the
# 5% of gaps that end sooner.
PREWARM_MIN_S = 600.0
# An out-of-bounds share over this and the gaps are not a pattern (the paper switches to a time-series
# forecast there; Berth falls back to the ski-rental rule).
OUT_OF_BOUNDS_MAX = 0.5


@dataclass(frozen=True)
class KeepAlive:
    """A level's keep-alive: keep an idle replica `window_s`; when `prewarm_s` > 0, unload it at once
    instead and load again `prewarm_s` after the level went idle, keeping it until `window_s`."""

    window_s: float
    prewarm_s: float
    source: KeepAliveSource
    gaps: int  # idle gaps in the histogram behind it (0 for the operator's window)


@dataclass
class _Slice:
    hour: int
    bins: dict[int, int] = field(default_factory=dict)
    out_of_bounds: int = 0


@dataclass
class _Level:
    slices: deque[_Slice] = field(default_factory=lambda: deque(maxlen=SLICES))
    idle_since: float | None = None
    gaps_added: int = 0  # with the hour, what a cached keep-alive was computed from
    cached: tuple[tuple, KeepAlive] | None = None

    def add(self, gap_s: float, now: float) -> None:
        self.gaps_added += 1
        hour = int(now // SLICE_S)
        if not self.slices or self.slices[-1].hour != hour:
            self.slices.append(_Slice(hour))
        current = self.slices[-1]
        if gap_s > RANGE_S:
            current.out_of_bounds += 1
        else:
            index = int(gap_s // BIN_S)
            current.bins[index] = current.bins.get(index, 0) + 1

    def histogram(self, now: float) -> tuple[dict[int, int], int]:
        """Counts per bin over the slices of the last SLICES hours, and the out-of-bounds count."""
        oldest = int(now // SLICE_S) - SLICES + 1
        counts: dict[int, int] = {}
        out = 0
        for piece in self.slices:
            if piece.hour < oldest:
                continue
            out += piece.out_of_bounds
            for index, count in piece.bins.items():
                counts[index] = counts.get(index, 0) + count
        return counts, out


class IdleGaps:
    """Per (model, level): the histogram of idle gaps, fed one demand reading per scaler tick."""

    def __init__(self) -> None:
        self._levels: dict[tuple[str, int], _Level] = {}
        self._needed: dict[str, int] = {}

    def observe(self, model: str, needed: int, now: float) -> None:
        """The model's demand needs `needed` replicas now: levels above it go idle, levels it reaches
        again end their gap."""
        before = self._needed.get(model, 0)
        for level in range(needed + 1, before + 1):
            self._level(model, level).idle_since = now
        for level in range(before + 1, needed + 1):
            state = self._level(model, level)
            if state.idle_since is not None:
                state.add(now - state.idle_since, now)
                state.idle_since = None
        self._needed[model] = needed

    def models(self) -> set[str]:
        """The models demand was read for: one at zero replicas may still be due a pre-warm."""
        return set(self._needed)

    def idle_since(self, model: str, level: int) -> float | None:
        """Since when demand has needed fewer than `level` replicas; None while it needs them (or never did)."""
        state = self._levels.get((model, level))
        return None if state is None else state.idle_since

    def keep_alive(
        self, model: str, level: int, now: float, hold_gpus: float, load_s: float, wait_gpus: float
    ) -> KeepAlive:
        """The level's learned keep-alive for a replica holding `hold_gpus` that takes `load_s` to load again.

        A cold start costs the load's GPU time and the steps that wait for it, each second of waiting
        counted as `wait_gpus` GPU-seconds: load_s × (hold_gpus + wait_gpus). A pre-warm's load costs
        only the GPU time (nobody waits for it, when the head holds)."""
        state = self._level(model, level)
        # The scaler asks every tick for every idle replica; the answer changes only with a new gap, a new
        # hour (old slices age out) or another replica's costs.
        key = (state.gaps_added, int(now // SLICE_S), hold_gpus, load_s, wait_gpus)
        if state.cached is not None and state.cached[0] == key:
            return state.cached[1]
        alive = _learn(state, now, hold_gpus, load_s, wait_gpus)
        state.cached = (key, alive)
        return alive

    def _level(self, model: str, level: int) -> _Level:
        return self._levels.setdefault((model, level), _Level())


def _learn(state: _Level, now: float, hold_gpus: float, load_s: float, wait_gpus: float) -> KeepAlive:
    """The keep-alive the level's histogram gives for these costs (IdleGaps.keep_alive's docstring)."""
    counts, out = state.histogram(now)
    inside = sum(counts.values())
    cost = _Costs(hold_gpus, load_s * (hold_gpus + wait_gpus), load_s * hold_gpus)
    break_even = cost.cold_start / max(hold_gpus, 1e-9)
    if inside < MIN_GAPS or out > OUT_OF_BOUNDS_MAX * (inside + out):
        return KeepAlive(min(break_even, RANGE_S), 0.0, "break-even", inside + out)
    edges = sorted(counts)
    head = _quantile_edge(counts, edges, inside, HEAD_QUANTILE)
    floors = [0.0] + ([head] if head >= PREWARM_MIN_S else [])
    best = min(
        (_cheapest_threshold(counts, edges, out, cost, floor) + (floor,) for floor in floors),
        key=lambda choice: choice[1],
    )
    window, _cost, prewarm = best
    if prewarm == 0 and window < break_even:
        # The histogram knows nothing past its longest gap, so its cheapest threshold sits just past it
        # and the next longer gap meets a cold start: the ski-rental window stays the floor.
        return KeepAlive(min(break_even, RANGE_S), 0.0, "break-even", inside + out)
    return KeepAlive(window, prewarm, "learned", inside + out)


def _quantile_edge(counts: dict[int, int], edges: list[int], total: int, q: float) -> float:
    """The lower edge of the bin holding the q-quantile: no more than q of the gaps are shorter."""
    seen = 0
    for index in edges:
        seen += counts[index]
        if seen >= q * total:
            return index * BIN_S
    return edges[-1] * BIN_S


@dataclass(frozen=True)
class _Costs:
    hold_gpus: float  # GPU-seconds per second held
    cold_start: float  # GPU-seconds a cold start costs, the waiting steps included
    prewarm_load: float  # GPU-seconds a pre-warm's load costs


def _cheapest_threshold(
    counts: dict[int, int], edges: list[int], out: int, cost: _Costs, floor: float
) -> tuple[float, float]:
    """(T, expected cost per idle gap) for the threshold T (`floor`, or a bin's upper edge past it) with the
    least expected cost, the replica unloaded at once and pre-warmed at `floor` when `floor` > 0.

    A gap (counted at its bin's midpoint) shorter than `floor` meets a cold start; one up to T holds the
    replica from `floor` to its end; a longer one holds it to T, then meets a cold start. One out of bounds
    is longer than any T. One pass over the bins in order, with running sums."""
    total = sum(counts.values()) + out
    early = sum(counts[i] for i in edges if (i + 0.5) * BIN_S < floor)
    reloads = (total - early) * cost.prewarm_load if floor > 0 else 0.0
    later = [i for i in edges if (i + 0.5) * BIN_S >= floor]
    beyond = sum(counts[i] for i in later) + out  # gaps still running at the threshold
    held_within = 0.0  # holding of the gaps that end before the threshold

    def expected(threshold: float) -> float:
        held = held_within + beyond * (threshold - floor)
        return (held * cost.hold_gpus + (early + beyond) * cost.cold_start + reloads) / total

    best_t, best_cost = floor, expected(floor)
    for index in later:
        held_within += counts[index] * ((index + 0.5) * BIN_S - floor)
        beyond -= counts[index]
        threshold = (index + 1) * BIN_S
        if (value := expected(threshold)) < best_cost:
            best_t, best_cost = threshold, value
    return best_t, best_cost
