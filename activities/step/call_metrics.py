"""What a settled LLM call adds to the metrics: latency per model, generation speed, tokens and cost.

Recorded where a call is booked (StoreStepBooks.settle), once per ledger row, so a retried settle does
not count twice; both the worker's own calls and a GPU node's (through the API) pass there. Through the
OpenTelemetry API only: a process that installed no MeterProvider records into no-ops.
Labels are model and tenant, never the task (one series per task would grow without end).
"""

from __future__ import annotations

from opentelemetry import metrics

from sdk.wire.ledger import LedgerEntry

# Seconds from tens of milliseconds (a warm small model) to minutes (a long answer of a 70B model).
LATENCY_BUCKETS_S = [0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300]
TOKENS_PER_S_BUCKETS = [1, 5, 10, 20, 40, 80, 160, 320, 640, 1280]

_meter = metrics.get_meter("berth.activities.step")
_ttft = _meter.create_histogram(
    "berth_step_ttft_seconds",
    unit="s",
    description="time to the first generated token, per model",
    explicit_bucket_boundaries_advisory=LATENCY_BUCKETS_S,
)
_duration = _meter.create_histogram(
    "berth_step_duration_seconds",
    unit="s",
    description="one LLM call from request to last token, per model",
    explicit_bucket_boundaries_advisory=LATENCY_BUCKETS_S,
)
_speed = _meter.create_histogram(
    "berth_generation_tokens_per_second",
    unit="{token}/s",
    description="completion tokens per second of a call",
    explicit_bucket_boundaries_advisory=TOKENS_PER_S_BUCKETS,
)
_tokens = _meter.create_counter(
    "berth_tokens_used", unit="{token}", description="tokens booked to tenants, by kind (prompt, completion)"
)
_cost = _meter.create_counter("berth_cost_usd", unit="usd", description="money booked to tenants, in US dollars")


def record_settled_call(entry: LedgerEntry, tenant: str) -> None:
    """Add one booked call to the step metrics."""
    model = {"model": entry.model}
    _ttft.record(entry.ttft_s, model)
    _duration.record(entry.duration_s, model)
    if entry.duration_s > 0:
        _speed.record(entry.completion_tokens / entry.duration_s, model)
    booked = {"model": entry.model, "tenant": tenant}
    _tokens.add(entry.prompt_tokens, {**booked, "kind": "prompt"})
    _tokens.add(entry.completion_tokens, {**booked, "kind": "completion"})
    _cost.add(entry.cost_usd, booked)
