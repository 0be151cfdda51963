"""Each model's recent service as its users felt it: calls, cold starts, time to first token, generation speed.

Read from the booked calls' "llm_call" events, written at the same settle (activities/step/store_books.py)
that records the berth_step_ttft_seconds and berth_generation_tokens_per_second histograms and from
the same ledger entry, so the admin UI's Models page and a dashboard count the same calls. The page
shows exact percentiles of the last hour; Prometheus estimates them from the histogram's buckets.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from sdk.wire.task_events import ModelCallEvent

# A step that had to put weights on a GPU first (the pool started a replica for it): from the node's
# disk, a datacenter peer, or the origin. The pool's berth_cold_starts counter counts those leases.
COLD_TIERS = frozenset({"disk", "datacenter", "origin"})


@dataclass(frozen=True)
class ModelFigures:
    calls: int
    cold_starts: int
    ttft_p50_s: float | None
    ttft_p95_s: float | None
    tokens_per_s_p50: float | None


def is_cold_start(call: ModelCallEvent) -> bool:
    return call.data.tier in COLD_TIERS


def model_figures(calls: Iterable[ModelCallEvent]) -> dict[str, ModelFigures]:
    """Per model, the figures of the given booked calls."""
    by_model: dict[str, list[ModelCallEvent]] = defaultdict(list)
    for call in calls:
        by_model[call.data.model].append(call)
    return {model: _figures(mine) for model, mine in by_model.items()}


def _figures(calls: list[ModelCallEvent]) -> ModelFigures:
    ttfts = sorted(c.data.ttft_s for c in calls if c.data.ttft_s is not None)
    speeds = sorted(c.data.tokens_per_s for c in calls if c.data.tokens_per_s is not None)
    return ModelFigures(
        calls=len(calls),
        cold_starts=sum(1 for c in calls if is_cold_start(c)),
        ttft_p50_s=percentile(ttfts, 50),
        ttft_p95_s=percentile(ttfts, 95),
        tokens_per_s_p50=percentile(speeds, 50),
    )


def percentile(ordered: list[float], pct: float) -> float | None:
    """Nearest-rank percentile of an ascending list: a figure some call really had, never an interpolation."""
    if not ordered:
        return None
    return ordered[max(0, math.ceil(pct / 100 * len(ordered)) - 1)]
