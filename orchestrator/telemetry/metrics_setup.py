"""One OpenTelemetry MeterProvider per process, read by Prometheus and, when configured, pushed over OTLP.

Instruments are defined where they are recorded, through the OTel API only
(`opentelemetry.metrics.get_meter("berth...")`), so activities never import the orchestrator. Until a
process calls `install_metrics`, those instruments are the API's no-op proxies; afterwards the
Prometheus reader aggregates in memory and does work only when `/metrics` is scraped, and the OTLP
reader (only when OTEL_EXPORTER_OTLP_ENDPOINT is set) exports on its own timer. Nothing is done per
record beyond the SDK's aggregation. Traces are set up beside this (tracing.py); a process entry point
calls both.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from opentelemetry import metrics
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from .probe_server import Check, ProbeServer

OTLP_ENDPOINT_ENV = "OTEL_EXPORTER_OTLP_ENDPOINT"
METRICS_CONTENT_TYPE = CONTENT_TYPE_LATEST

_provider: MeterProvider | None = None


def install_metrics(service_name: str, extra_readers: Sequence[MetricReader] = ()) -> MeterProvider:
    """Set this process's MeterProvider; later calls return the first one (OTel allows one per process,
    and the Prometheus reader registers itself once with prometheus_client's registry).

    `extra_readers`: e.g. an InMemoryMetricReader in tests; they only take effect on the first call.
    """
    global _provider
    if _provider is not None:
        return _provider
    readers: list[MetricReader] = [PrometheusMetricReader(), *extra_readers]
    if os.environ.get(OTLP_ENDPOINT_ENV):
        # Imported only when used: the exporter pulls in protobuf and requests.
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

        readers.append(PeriodicExportingMetricReader(OTLPMetricExporter()))
    _provider = MeterProvider(resource=Resource.create({"service.name": service_name}), metric_readers=readers)
    metrics.set_meter_provider(_provider)
    return _provider


def serve_metrics(port: int, live: Check | None = None, ready: Check | None = None, *, host: str) -> ProbeServer | None:
    """Serve `/metrics`, and `/healthz` and `/readyz` from `live` and `ready`, on `host`:`port` from a daemon thread,
    for a process with no HTTP server of its own (a node agent, the orchestrator worker); port 0 serves nothing."""
    return ProbeServer(port, live, ready, host=host) if port else None


def metrics_text() -> bytes:
    """The process's metrics in the Prometheus text format, as `/metrics` serves them."""
    return generate_latest(REGISTRY)
