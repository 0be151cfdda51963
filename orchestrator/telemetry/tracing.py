"""Traces: one TracerProvider per process, and the Temporal interceptor that carries a task's trace.

A task is one trace because Temporal's TracingInterceptor writes the span context into every
workflow, activity and child-workflow header: the API's client starts the root span, the
orchestrator worker continues it in the workflow and its activities, node agents in generation,
authors' tool workers in tool calls. Workflow spans come only from the interceptor, which makes
them replay-safe (none on replay, no wall clock of the workflow's own).

Nothing is set up unless asked: with neither OTEL_EXPORTER_OTLP_ENDPOINT nor BERTH_OTEL_CONSOLE,
the OpenTelemetry API stays on its no-op tracer, so spans cost a function call and record nothing.
"""

from __future__ import annotations

import os

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SimpleSpanProcessor
from temporalio.contrib.opentelemetry import TracingInterceptor

OTLP_ENDPOINT_ENV = "OTEL_EXPORTER_OTLP_ENDPOINT"
CONSOLE_ENV = "BERTH_OTEL_CONSOLE"  # set by `berth up --otel-console` for every process it starts

_configured = False


def configure_tracing(service_name: str) -> bool:
    """Install this process's TracerProvider from the environment; True when spans will be exported.

    Once per process: OpenTelemetry refuses to replace a global provider, so later calls change nothing."""
    global _configured
    otlp = os.environ.get(OTLP_ENDPOINT_ENV)
    console = os.environ.get(CONSOLE_ENV, "") not in ("", "0")
    if _configured or not (otlp or console):
        return _configured
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    if otlp:
        # Only here: the exporter brings protobuf and requests, which a process exporting nothing does not need.
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))  # reads the OTEL_* env itself
    if console:
        provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))
    trace.set_tracer_provider(provider)
    _configured = True
    return True


def tracing_interceptor() -> TracingInterceptor:
    """The interceptor for a Temporal client; workers built on that client inherit it.

    Its tracer follows the global provider, so it may be made before `configure_tracing` runs."""
    return TracingInterceptor()
