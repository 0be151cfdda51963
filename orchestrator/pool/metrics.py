"""What the pool adds to the metrics: how long placement decisions take, why steps wait for a GPU and for
how long, how deep the queue is, cold starts by locality tier, and how many recent grants placement predicted
to meet their latency objectives (against the attainment target they asked for).

Recorded in the process that holds the pool (the orchestrator worker), which serves them on its own
/metrics (orchestrator/worker.py says why). Labels are model, outcome, reason and tier, never the task.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Observation

from sdk.wire.lease import LeaseGrant, LeaseRequest, Wait

# Placement is pure scoring over the fleet in memory: micro- to milliseconds, unless it re-reads the store.
DECISION_BUCKETS_S = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25]
# Waits for a GPU: from a queued step's seconds to a cold start of a large model (minutes).
WAIT_BUCKETS_S = [0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800]

_meter = metrics.get_meter("berth.pool")
_decision = _meter.create_histogram(
    "berth_placement_decision_seconds",
    unit="s",
    description="time the pool took to answer an acquire, by outcome",
    explicit_bucket_boundaries_advisory=DECISION_BUCKETS_S,
)
_waits = _meter.create_counter(
    "berth_gpu_wait_answers",
    unit="{answer}",
    description="acquires answered 'wait', by reason (a waiting step asks again, so this counts answers, not steps)",
)
_waited = _meter.create_histogram(
    "berth_gpu_wait_seconds",
    unit="s",
    description="how long a step that had to wait waited for its lease",
    explicit_bucket_boundaries_advisory=WAIT_BUCKETS_S,
)
_cold_starts = _meter.create_counter(
    "berth_cold_starts", unit="{replica}", description="leases that start a new replica, by where its weights come from"
)
_judged = _meter.create_counter(
    "berth_slo_grants",
    unit="{grant}",
    description="grants with per-call latency objectives, by whether placement predicted them to meet them",
)


def record_decision(req: LeaseRequest, grant: LeaseGrant, decision_s: float) -> None:
    """One acquire's answer and how long it took."""
    _decision.record(decision_s, {"model": req.model, "outcome": grant.outcome})
    if isinstance(grant, Wait):
        _waits.add(1, {"model": req.model, "reason": grant.wait_reason})


def record_grant(model: str, tier: str, waited_s: float | None, cold_start: bool) -> None:
    """A lease granted. `waited_s`: how long the step had queued first (None: it did not queue)."""
    if waited_s is not None:
        _waited.record(waited_s, {"model": model})
    if cold_start:
        _cold_starts.add(1, {"model": model, "tier": tier})


def record_judgement(model: str, service_class: str, met: bool) -> None:
    """A grant placement judged against its latency objectives: predicted to meet them (`met`) or not."""
    _judged.add(1, {"model": model, "service_class": service_class, "met": "true" if met else "false"})


_depth: Callable[[], dict[str, tuple[int, float]]] = dict


def watch_queue(depth: Callable[[], dict[str, tuple[int, float]]]) -> None:
    """Make `depth()` (per model: waiting steps, and the longest wait in seconds) the source of the queue
    gauges; one pool per process, the latest replaces the earlier (as in tests that build several)."""
    global _depth
    _depth = depth


def _observe_depth(_options: CallbackOptions) -> Iterator[Observation]:
    for model, (waiting, _longest) in _depth().items():
        yield Observation(waiting, {"model": model})


def _observe_longest(_options: CallbackOptions) -> Iterator[Observation]:
    for model, (_waiting, longest) in _depth().items():
        yield Observation(longest, {"model": model})


_meter.create_observable_gauge(
    "berth_gpu_queue_depth", [_observe_depth], unit="{step}", description="steps waiting for a GPU, per model"
)
_meter.create_observable_gauge(
    "berth_gpu_queue_longest_wait_seconds",
    [_observe_longest],
    unit="s",
    description="how long the longest-waiting step of each model has waited for a GPU",
)


_attainment: Callable[[], dict[tuple[str, str], tuple[float, float]]] = dict


def watch_attainment(attainment: Callable[[], dict[tuple[str, str], tuple[float, float]]]) -> None:
    """Make `attainment()` (per model and service class with judged grants in its recent window: the share
    predicted to meet their objectives, and the target they asked for) the source of the attainment gauges;
    as `watch_queue`."""
    global _attainment
    _attainment = attainment


def _observe_attainment(_options: CallbackOptions) -> Iterator[Observation]:
    for (model, service_class), (share, _target) in _attainment().items():
        yield Observation(share, {"model": model, "service_class": service_class})


def _observe_target(_options: CallbackOptions) -> Iterator[Observation]:
    for (model, service_class), (_share, target) in _attainment().items():
        yield Observation(target, {"model": model, "service_class": service_class})


_meter.create_observable_gauge(
    "berth_slo_attainment_ratio",
    [_observe_attainment],
    unit="1",
    description="share of each model's recent judged grants predicted to meet their latency objectives",
)
_meter.create_observable_gauge(
    "berth_slo_attainment_target_ratio",
    [_observe_target],
    unit="1",
    description="the strictest attainment target among each model's recent judged grants",
)
