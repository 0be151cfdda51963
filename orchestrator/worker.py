"""The orchestrator worker: runs AgentTaskWorkflow and the activities that need the store.

It polls the control queue and holds the pool: leases and bookkeeping run as local
activities in this process, next to the store and the fleet. Model calls of self-hosted
models run on the GPU nodes' own queues; hosted models (and, without a fleet, every model)
are called from here.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

from temporalio.client import Client
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from activities.bookkeeping import TaskBookkeeping
from activities.llm_step import LlmStepActivities
from activities.pool_lease import PoolLeases
from activities.step.heartbeats import HEARTBEAT_EVERY_S
from activities.step.ports import LeasePool
from activities.step.store_books import StoreStepBooks
from activities.tool_workers import ToolWorkers
from sdk.wire.contracts import CONTROL_TASK_QUEUE
from workflows.agent_task import AgentTaskWorkflow
from workflows.fleet_ops import PrewarmWorkflow, ReplicaLoadWorkflow, ReplicaUnloadWorkflow

from .catalogue import ModelCatalogue
from .config import BerthConfig
from .pool.autoscaler import Autoscaler
from .pool.direct import DirectRouting
from .pool.service import PoolService
from .pool.weights import tuned
from .store import Store
from .telemetry import install_metrics, serve_metrics
from .telemetry.temporal_metrics import TemporalMetrics
from .telemetry.tracing import configure_tracing
from .temporal import connect_temporal

log = logging.getLogger("berth.worker")

# The worker records what only it sees (the pool's placement and queue, the bookkeeping's budget and
# preemption events, hosted models' calls) and serves them on a port of its own: sending the pool's
# histograms to the API's /metrics through the store would need a table and a second aggregation of figures
# the OTel SDK already aggregates here. Unset (or 0): nothing served; OTLP still exports when configured.
# The same port answers /healthz: 200 while the worker polls the control queue.
WORKER_METRICS_PORT_ENV = "BERTH_WORKER_METRICS_PORT"


def build_worker(
    client: Client,
    store: Store,
    config: BerthConfig,
    task_queue: str = CONTROL_TASK_QUEUE,
    pool: LeasePool | None = None,
) -> Worker:
    """The control-queue worker; without `pool`, every model is called from here (no fleet)."""
    llm = LlmStepActivities(
        StoreStepBooks(store.checkpoints, store.tasks, store.events, store.ledger, steps_in=store.transaction),
        ModelCatalogue(config, store.models),
    )
    books = TaskBookkeeping(store.checkpoints, store.tasks, store.events, store.agents, steps_in=store.transaction)
    leases = PoolLeases(pool or DirectRouting(), store.ledger, write_predecessor=books.checkpoint)
    tool_workers = ToolWorkers(client)
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[AgentTaskWorkflow, ReplicaLoadWorkflow, ReplicaUnloadWorkflow, PrewarmWorkflow],
        # Live, workflow code runs outside Temporal's sandbox; the judge (orchestrator/replay/judge.py) replays
        # every history a test makes inside it, where any call the sandbox forbids fails the replay. The sandbox
        # re-ran every workflows/ module for each task the worker took up and wrapped every activation: a quarter
        # of this process's CPU under the load burst (docs/performance.md, "One step core").
        workflow_runner=UnsandboxedWorkflowRunner(),
        activities=[
            llm.generate,
            books.begin_task,
            books.checkpoint,
            books.record_state,
            books.resolve_agent,
            leases.acquire,
            leases.acquire_step,
            leases.release,
            leases.node_liveness,
            leases.book_cut,
            tool_workers.polling,
        ],
        activity_executor=ThreadPoolExecutor(max_workers=200),
        max_concurrent_activities=200,
        max_concurrent_workflow_tasks=50,
        graceful_shutdown_timeout=timedelta(seconds=8),
        # Every beat goes out (Temporal would hold them to 0.8 × the heartbeat timeout): the generation's progress
        # stays fresh, and a cancellation reaches it within a beat instead of seconds later.
        max_heartbeat_throttle_interval=timedelta(seconds=HEARTBEAT_EVERY_S),
    )


async def run_worker(config: BerthConfig, task_queue: str = CONTROL_TASK_QUEUE) -> None:
    """Serve the control queue (tests: a queue of their own) until cancelled (Ctrl-C / SIGTERM)."""
    configure_tracing("berth-orchestrator")
    install_metrics("berth-worker")
    worker: Worker | None = None

    def polling() -> str | None:
        # Served from the start, so the port answers (503, with the reason) while Temporal is still awaited.
        if worker is None:
            return "starting: connecting to the store and Temporal"
        return None if worker.is_running else f"the worker is not polling {task_queue}"

    probes = serve_metrics(int(os.environ.get(WORKER_METRICS_PORT_ENV) or 0), live=polling, host=config.host)
    scaling = None
    # Temporal's own worker metrics (workflow task failures above all) on the same /metrics: temporal_metrics.py.
    temporal_metrics = TemporalMetrics(namespace=config.temporal_namespace, task_queue=task_queue)
    draining = asyncio.ensure_future(temporal_metrics.drain_forever())
    try:
        store = Store.open(config.resolved_database_url)
        with temporal_metrics.as_default():  # the client, and so the worker built on it, on this runtime
            client = await connect_temporal(config)
        pool = None
        if config.fleet:
            pool = PoolService(
                store,
                ModelCatalogue(config, store.models),
                tuned(config.placement_overrides),
                node_lost_after_s=config.node_lost_after_s,
                pool_id=config.control_plane_id,
                placement_policy=config.placement_policy,
            )
        worker = build_worker(client, store, config, task_queue=task_queue, pool=pool)
        # What is alive now lives as long as the process (modules, the pool, the store): out of the collector's
        # sight, a full collection inside a workflow activation scans only what tasks made since, and cannot
        # hold the activation past Temporal's 2 s deadlock check on a busy machine.
        gc.freeze()
        log.info("worker polling %s on %s", task_queue, config.resolved_temporal_address)
        scaling = asyncio.ensure_future(Autoscaler(pool, client).run()) if pool is not None else None
        # SIGTERM (from `berth up` or an orchestrator) shuts down gracefully: in-flight activities
        # get a chance to finish instead of waiting out their heartbeat timeout elsewhere.
        run = asyncio.ensure_future(worker.run())
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, run.cancel)
        await run
    except asyncio.CancelledError:
        log.info("worker stopped")
    finally:
        if scaling is not None:
            scaling.cancel()
        draining.cancel()
        if probes is not None:
            probes.close()


def main(config: BerthConfig) -> None:
    try:
        asyncio.run(run_worker(config))
    except KeyboardInterrupt:
        pass
