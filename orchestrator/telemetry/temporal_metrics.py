"""Temporal's own SDK worker metrics on the process's /metrics: workflow task failures, poll and schedule
latencies, slots in use, sticky cache.

Temporal's Core (the Rust engine under the Python SDK) keeps these, and can serve them on a Prometheus port of
its own; Berth reads them from a MetricBuffer instead and records each update into this process's OpenTelemetry
MeterProvider, so they come out of the port the worker already serves (and over OTLP when that is set): no
second target to scrape, no second port to open in a chart. Names are Core's, prefixed `temporal_` (a counter
gains `_total`, as Berth's do): `temporal_workflow_task_execution_failed_total` is the one on-call watches, the
workflow tasks that fail (nondeterminism, a bug, a payload that cannot be decoded) and, retried without end,
leave their task wedged and silent.

The buffer is drained every DRAIN_EVERY_S on the worker's event loop; Core drops updates (and logs it) once
BUFFER_SIZE are waiting.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from opentelemetry import metrics
from temporalio.runtime import (
    BUFFERED_METRIC_KIND_COUNTER,
    BUFFERED_METRIC_KIND_GAUGE,
    BufferedMetric,
    MetricBuffer,
    MetricBufferDurationFormat,
    Runtime,
    TelemetryConfig,
)

# A busy worker runs ~50 workflow tasks and ~200 activities at once, each a handful of updates per second:
# a few thousand a second at most, so 10,000 drained every second leaves room over that.
BUFFER_SIZE = 10_000
DRAIN_EVERY_S = 1.0
PREFIX = "temporal_"
# Core's latencies: a poll's long wait (up to 60 s), a workflow task's milliseconds, an activity's minutes.
LATENCY_BUCKETS_S = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300]
# Declared at 0 from the start, so an alert's rate has a series before the first failure (and absent() means
# the worker is not exporting, not that nothing failed).
# Core's description: the seeded instrument is the one Core's updates then go to (a second instrument of the name,
# described otherwise, would write the family twice, and Prometheus refuses a scrape that does).
SEEDED_COUNTERS = {"workflow_task_execution_failed": "Count of workflow task execution failures"}

_meter = metrics.get_meter("berth.temporal")


class TemporalMetrics:
    """A Temporal Runtime whose Core metrics go into this process's MeterProvider.

    Connect the worker's client inside `as_default()` (a worker runs on its client's runtime); run
    `drain_forever` beside the worker."""

    def __init__(self, *, namespace: str, task_queue: str) -> None:
        self._buffer = MetricBuffer(BUFFER_SIZE, duration_format=MetricBufferDurationFormat.SECONDS)
        self.runtime = Runtime(
            # Core's service_name label would say "temporal-core-sdk" on every series: the scrape's job says more.
            telemetry=TelemetryConfig(metrics=self._buffer, metric_prefix=PREFIX, attach_service_name=False)
        )
        # Core hands the same metric and attribute objects for every update of them: cached by identity, each with
        # the object itself held, so its id cannot be taken by another object once Core lets it go.
        self._instruments: dict[int, tuple[BufferedMetric, _Recorder]] = {}
        self._attributes: dict[int, tuple[Mapping[str, Any], dict[str, Any]]] = {}
        for name, description in SEEDED_COUNTERS.items():
            _counter(PREFIX + name, description).add(0, {"namespace": namespace, "task_queue": task_queue})

    @contextmanager
    def as_default(self) -> Iterator[Runtime]:
        """This runtime as the SDK's default while the client connects (the client keeps it), and the one before
        back afterwards: a test process that runs a worker in-process leaves its other clients as they were."""
        before = Runtime.default()
        Runtime.set_default(self.runtime, error_if_already_set=False)
        try:
            yield self.runtime
        finally:
            Runtime.set_default(before, error_if_already_set=False)

    def drain(self) -> int:
        """Record every update Core buffered since the last drain; how many there were."""
        updates = self._buffer.retrieve_updates()
        for update in updates:
            cached = self._attributes.get(id(update.attributes))
            if cached is None:
                cached = self._attributes[id(update.attributes)] = (update.attributes, _plain(update.attributes))
            self._instrument(update.metric).record(update.value, cached[1])
        return len(updates)

    async def drain_forever(self) -> None:
        try:
            while True:
                self.drain()
                await asyncio.sleep(DRAIN_EVERY_S)
        finally:
            self.drain()  # what the last seconds of a stopping worker did

    def _instrument(self, metric: BufferedMetric) -> _Recorder:
        cached = self._instruments.get(id(metric))
        if cached is None:
            cached = self._instruments[id(metric)] = (metric, _Recorder(metric))
        return cached[1]


def _plain(attributes: Mapping[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in attributes.items()}


_counters: dict[str, metrics.Counter] = {}


def _counter(name: str, description: str) -> metrics.Counter:
    """One counter a name in the process, however many runtimes (a test process may run several workers)."""
    if name not in _counters:
        _counters[name] = _meter.create_counter(name, description=description)
    return _counters[name]


class _Recorder:
    """One Core metric as an OpenTelemetry instrument: a counter adds its deltas, a gauge sets its value, a
    histogram records each observation (in seconds where it is a duration)."""

    def __init__(self, metric: BufferedMetric) -> None:
        description = metric.description or ""
        self.kind = metric.kind
        if metric.kind == BUFFERED_METRIC_KIND_COUNTER:
            self._counter = _counter(metric.name, description)
        elif metric.kind == BUFFERED_METRIC_KIND_GAUGE:
            self._gauge = _meter.create_gauge(metric.name, description=description)
        else:
            self._histogram = _meter.create_histogram(
                metric.name, description=description, explicit_bucket_boundaries_advisory=LATENCY_BUCKETS_S
            )

    def record(self, value: float, attributes: dict[str, Any]) -> None:
        if self.kind == BUFFERED_METRIC_KIND_COUNTER:
            self._counter.add(value, attributes)
        elif self.kind == BUFFERED_METRIC_KIND_GAUGE:
            self._gauge.set(value, attributes)
        else:
            self._histogram.record(value, attributes)
