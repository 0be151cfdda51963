"""Traces: a task with tools and a sub-agent is one connected trace, and an author's span joins it.

The workers and the client get Temporal's TracingInterceptor as Berth's processes do (through the
client); spans land in an in-memory exporter installed as this process's provider."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from temporalio.client import Client

from orchestrator.telemetry.tracing import CONSOLE_ENV, OTLP_ENDPOINT_ENV, tracing_interceptor
from sdk import Agent, TaskStatus, tool
from tests.workflow.test_fleet_interruptions import UNSEEN_TOKENS

# Imported under another name so that it is not collected here too: its run, traced, is the scenario below.
from tests.workflow.test_fleet_interruptions import (
    test_a_step_preempted_mid_answer_continues_its_text_on_another_node as preempted_step_scenario,
)

_exporter = InMemorySpanExporter()


@pytest.fixture(scope="module")
def spans() -> Iterator[InMemorySpanExporter]:
    """The process's provider, set once (OpenTelemetry allows no second); shut at the end so later
    tests record nothing."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(_exporter))
    trace.set_tracer_provider(provider)
    yield _exporter
    provider.shutdown()


@pytest.fixture
def temporal_client(temporal_client: Client, spans: InMemorySpanExporter) -> Client:
    """The dev server's client with the interceptor: the `berth` harness builds its workers on it."""
    return Client(**{**temporal_client.config(), "interceptors": [tracing_interceptor()]})


def _task_spans(spans: InMemorySpanExporter, task_id: str) -> list[ReadableSpan]:
    """The spans of the task's trace, checked to be one tree under the client's start."""
    roots = [
        s
        for s in spans.get_finished_spans()
        if s.name == "StartWorkflow:AgentTaskWorkflow" and s.attributes.get("temporalWorkflowID") == task_id
    ]
    assert len(roots) == 1
    task = [s for s in spans.get_finished_spans() if s.context.trace_id == roots[0].context.trace_id]
    by_id = {s.context.span_id: s for s in task}
    assert [s for s in task if s.parent is None] == roots
    for span in task:  # every span's parents are in the trace, up to the client's root
        while span.parent is not None:
            span = by_id[span.parent.span_id]
        assert span is roots[0]
    return task


async def test_a_task_with_tools_and_a_sub_agent_is_one_connected_trace(berth, spans) -> None:
    @tool
    def search(query: str) -> str:
        """Search the knowledge base."""
        with trace.get_tracer("author.tools").start_as_current_span("author.lookup") as span:
            span.set_attribute("query", query)
            return f"facts about {query}: bandwidth 3.35 TB/s"

    research = Agent(berth.unique("research"), "llama-3.1-8b", "Research carefully.", [search])
    await berth.serve(research)
    coordinator = Agent(berth.unique("coordinator"), "llama-3.1-8b", "Delegate.", allow_spawn=True)
    handle = await berth.start(coordinator, f"Plan\ndelegate to {research.name}: H100 bandwidth (budget 5000)", 30_000)
    state = await handle.result()
    assert state.status == TaskStatus.completed, state.error
    assert len(state.children) == 1

    task = _task_spans(spans, state.task_id)
    names = {s.name for s in task}
    assert {
        "RunWorkflow:AgentTaskWorkflow",
        "StartChildWorkflow:AgentTaskWorkflow",
        "RunActivity:berth.generate",
        "RunActivity:berth.run_tool",
        "author.lookup",
    } <= names
    child_runs = [
        s
        for s in task
        if s.name == "RunWorkflow:AgentTaskWorkflow" and s.attributes["temporalWorkflowID"] == state.children[0]
    ]
    assert len(child_runs) == 1

    generations = [s for s in task if s.name == "RunActivity:berth.generate"]
    for g in generations:
        assert g.attributes["berth.model"] == "llama-3.1-8b"
        assert g.attributes["berth.ttft_s"] > 0 and g.attributes["berth.tokens_per_s"] > 0
        assert g.attributes["berth.prompt_tokens"] > 0 and g.attributes["berth.completion_tokens"] > 0
        assert "berth.checkpoint.seq" in g.attributes
    (tool_span,) = [s for s in task if s.name == "RunActivity:berth.run_tool"]
    assert tool_span.attributes["berth.tool"] == "search"
    assert tool_span.attributes["berth.idempotency_key"].startswith(state.children[0])
    (author,) = [s for s in task if s.name == "author.lookup"]
    assert author.parent.span_id == tool_span.context.span_id
    assert author.attributes["query"] == "H100 bandwidth"


async def test_a_preempted_step_shows_its_placement_and_interruption(
    temporal_client: Client, engine_url: str, tmp_path: Path, spans
) -> None:
    await preempted_step_scenario(temporal_client, engine_url, tmp_path)
    [cut_id] = {
        s.attributes["temporalWorkflowID"]
        for s in spans.get_finished_spans()
        if s.name == "StartWorkflow:AgentTaskWorkflow" and s.attributes["temporalWorkflowID"].startswith("cut-")
    }
    task = _task_spans(spans, cut_id)

    acquires = [s for s in task if s.name == "RunActivity:berth.pool.acquire"]
    assert [(s.attributes["berth.lease.outcome"], s.attributes["berth.decided_by"]) for s in acquires] == [
        ("placed", "locality")
    ] * 2
    node_a, node_b = (s.attributes["berth.node"] for s in acquires)
    [served] = [s for s in task if s.name == "RunActivity:berth.generate" and s.status.is_ok]
    assert (served.attributes["berth.node"], served.attributes["berth.tier"]) == (node_b, "warm")
    [event] = [e for s in task for e in s.events if e.name == "berth.interruption"]
    assert (event.attributes["berth.kind"], event.attributes["berth.node_id"]) == ("notice", node_a)
    assert event.attributes["berth.resumed_on"] == node_b
    assert event.attributes["berth.tokens_lost"] == UNSEEN_TOKENS and event.attributes["berth.tokens_kept"] > 0


def _in_fresh_process(code: str, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in (OTLP_ENDPOINT_ENV, CONSOLE_ENV)}
    return subprocess.run(
        [sys.executable, "-c", code], env={**clean, **env}, capture_output=True, text=True, timeout=60, check=True
    )


def test_without_an_exporter_nothing_is_set_up_or_recorded() -> None:
    out = _in_fresh_process(
        "from opentelemetry import trace\n"
        "from orchestrator.telemetry.tracing import configure_tracing, tracing_interceptor\n"
        "assert configure_tracing('t') is False\n"
        "assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)\n"
        "with tracing_interceptor().tracer.start_as_current_span('x') as s: assert not s.is_recording()\n"
        "print('ok')\n"
    )
    assert out.stdout.strip() == "ok"


def test_the_console_flag_prints_spans() -> None:
    out = _in_fresh_process(
        "from opentelemetry import trace\n"
        "from orchestrator.telemetry.tracing import configure_tracing\n"
        "assert configure_tracing('berth-test') is True\n"
        "with trace.get_tracer('t').start_as_current_span('printed-span'): pass\n",
        **{CONSOLE_ENV: "1"},
    )
    assert '"name": "printed-span"' in out.stdout and "berth-test" in out.stdout
