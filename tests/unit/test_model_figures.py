"""Per-model figures from booked calls: nearest-rank percentiles, cold starts by tier, other events skipped."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from orchestrator.telemetry.model_figures import model_figures, percentile
from sdk import TaskEvent
from sdk.wire.task_events import ModelCallEvent, events_of

AT = datetime(2026, 11, 30, tzinfo=UTC)


def call(model: str, ttft_s: float, tier: str = "warm", tokens_per_s: float | None = 40.0) -> TaskEvent:
    return TaskEvent(  # as the log reads it: the figures take what parses into a model call
        seq=0,
        task_id="t",
        kind="llm_call",
        at=AT,
        data={"model": model, "ttft_s": ttft_s, "tier": tier, "tokens_per_s": tokens_per_s},
    )


def test_figures_are_per_model_with_cold_starts_counted_by_the_tier_the_weights_came_from() -> None:
    events = [
        call("big", 30.0, "origin"),
        call("big", 0.4),
        call("big", 0.5, "loading"),
        call("big", 12.0, "disk"),
        call("small", 0.05, "datacenter", None),
        TaskEvent(seq=0, task_id="t", kind="interruption", at=AT, data={}),
    ]
    figures = model_figures(events_of(ModelCallEvent, events))
    assert set(figures) == {"big", "small"}
    big, small = figures["big"], figures["small"]
    assert (big.calls, big.cold_starts, big.ttft_p50_s, big.ttft_p95_s, big.tokens_per_s_p50) == (4, 2, 0.5, 30.0, 40.0)
    assert (small.calls, small.cold_starts, small.ttft_p50_s, small.tokens_per_s_p50) == (1, 1, 0.05, None)


def test_percentiles_of_nothing_are_none() -> None:
    assert percentile([], 50) is None and model_figures([]) == {}


@given(st.lists(st.floats(min_value=0, max_value=1e4, allow_nan=False), min_size=1), st.integers(1, 100))
def test_a_percentile_is_a_value_some_call_had_with_that_share_of_calls_at_or_below_it(values, pct) -> None:
    ordered = sorted(values)
    p = percentile(ordered, pct)
    assert p in ordered
    assert sum(1 for v in ordered if v <= p) >= pct / 100 * len(ordered)
    assert sum(1 for v in ordered if v < p) < pct / 100 * len(ordered)
