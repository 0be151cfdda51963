"""Temporal's SDK worker metrics come out of the process's /metrics (orchestrator/telemetry/temporal_metrics.py),
under the names the alert rules read: a workflow whose task fails on every attempt (a wedged task, silent
otherwise) shows as temporal_workflow_task_execution_failed_total rising."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from prometheus_client.parser import text_string_to_metric_families
from temporalio import workflow
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from orchestrator.telemetry import metrics_text
from orchestrator.telemetry.temporal_metrics import TemporalMetrics


@workflow.defn(name="WedgedOnPurpose")
class WedgedOnPurpose:
    @workflow.run
    async def run(self) -> None:
        raise RuntimeError("a bug in workflow code: the workflow task fails on every attempt")


def failures(queue: str) -> dict[str, float]:
    """failure_reason -> failed workflow tasks of `queue`, as a scrape reads them."""
    for family in text_string_to_metric_families(metrics_text().decode()):
        if family.name == "temporal_workflow_task_execution_failed":
            return {
                s.labels.get("failure_reason", ""): s.value
                for s in family.samples
                if s.name.endswith("_total") and s.labels.get("task_queue") == queue
            }
    return {}


async def test_a_wedged_workflow_task_shows_as_temporal_workflow_task_execution_failed(
    temporal_env: WorkflowEnvironment, metrics_reader: InMemoryMetricReader
) -> None:
    queue = f"wedged-{uuid.uuid4().hex[:8]}"
    bridge = TemporalMetrics(namespace="default", task_queue=queue)
    assert failures(queue) == {"": 0}  # declared at 0 before any failure: the alert has a series to rate
    with bridge.as_default():
        client = await Client.connect(temporal_env.client.service_client.config.target_host)
    async with Worker(
        client, task_queue=queue, workflows=[WedgedOnPurpose], workflow_runner=UnsandboxedWorkflowRunner()
    ):
        handle = await client.start_workflow(
            "WedgedOnPurpose", id=queue, task_queue=queue, task_timeout=timedelta(seconds=1)
        )
        for _ in range(100):
            bridge.drain()
            if failures(queue).get("WorkflowError", 0) >= 2:
                break
            await asyncio.sleep(0.1)
        await handle.terminate("the test is over")
    assert failures(queue)["WorkflowError"] >= 2  # retried, failing each time
