"""Each model's time to first token over the last hour, p50 and p95 per slice of time, for the sparklines.

From the same booked calls' "llm_call" events the Models page's hour figures come from, so a sparkline and
the figure beside it count the same calls. A slice with no call has no point: a gap, not a zero.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import timedelta

from sdk.wire.task_events import ModelCallEvent

from ..telemetry.model_figures import percentile
from .charts import Series, Window

SLICE = timedelta(minutes=5)


def ttft_history(calls: Iterable[ModelCallEvent], window: Window, slice_: timedelta = SLICE) -> dict[str, list[Series]]:
    """Per model, its p50 and p95 time to first token (s) in each slice of `window` that had calls."""
    slices: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for call in calls:
        ttft = call.data.ttft_s
        if ttft is None or not window.start <= call.at <= window.end:
            continue
        slices[call.data.model][int((call.at - window.start) / slice_)].append(ttft)
    history: dict[str, list[Series]] = {}
    for model, by_slice in slices.items():
        p50, p95 = [], []
        for index in sorted(by_slice):
            ordered = sorted(by_slice[index])
            at = min(window.end, window.start + slice_ * index + slice_ / 2)
            p50.append((at, percentile(ordered, 50) or 0.0))
            p95.append((at, percentile(ordered, 95) or 0.0))
        history[model] = [Series("p50", p50), Series("p95", p95)]
    return history
