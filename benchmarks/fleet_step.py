"""What a step costs on the GPU fleet, against the same step called from the control queue.

The same 100-step agent task (99 tool steps and the answer) on "llama-3.1-8b" at zero
simulated latency runs twice on one dev server in one process:

- direct (the baseline): `build_worker` without a pool; every model call goes from the
  control queue to a simulated engine (its own process, as in `step_overhead`);
- fleet: `build_worker` with a `PoolService`; every step acquires a lease (local activity),
  runs its model call on the node's queue `node/<id>`, where one in-process `NodeAgent` calls a
  warm simulated replica (its own process) and does the step's bookkeeping through the
  control-plane API (served for real on a loopback port, in a thread), then releases the lease.

The replica is loaded by a short warm-up task first, so the timed task sees warm steps only.
Besides the totals, an activity interceptor on the client (so on every worker) times each
activity's execution, the API counts the requests the node makes, and each task's history is
counted; the gaps between those and the step time are Temporal dispatch.

    python -m benchmarks.fleet_step
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import temporalio.client  # noqa: E402
import temporalio.worker  # noqa: E402
from temporalio.client import Client  # noqa: E402
from temporalio.contrib.pydantic import pydantic_data_converter  # noqa: E402
from temporalio.testing import WorkflowEnvironment  # noqa: E402

from orchestrator.api import TemporalGateway  # noqa: E402
from orchestrator.catalogue import ModelCatalogue  # noqa: E402
from orchestrator.config import BerthConfig  # noqa: E402
from orchestrator.engines.replicas import SimulatedReplicaEngine  # noqa: E402
from orchestrator.engines.serving import listening_socket  # noqa: E402
from orchestrator.node import SimulatedDiscovery, WeightsCache, parse_simulate  # noqa: E402
from orchestrator.node.agent import NodeAgent, NodeOptions  # noqa: E402
from orchestrator.node.control_plane import ControlPlane  # noqa: E402
from orchestrator.node.replicas import ReplicaManager  # noqa: E402
from orchestrator.pool.service import PoolService  # noqa: E402
from orchestrator.server import create_app
from orchestrator.store import Store  # noqa: E402
from orchestrator.worker import build_worker  # noqa: E402
from sdk import (  # noqa: E402
    Agent,
    TaskState,
    tool_worker,  # noqa: E402
)

from ._results import write_results  # noqa: E402
from ._tasks import observe, run_task  # noqa: E402
from .step_overhead import _free_port, _wait  # noqa: E402

STEPS = 100
ROUNDS = 2  # direct, fleet, direct, fleet: alternated so drift on the machine hits both alike
MODEL = "llama-3.1-8b"
NODE_ID = "bench-node-1"
JOIN_TOKEN = "bench-join-token"
DIRECT_QUEUE = "bench-direct"
FLEET_QUEUE = "bench-fleet"


AGENT = Agent(
    "bench-fleet-agent",
    MODEL,
    "Observe each topic, then answer.",
    [observe],
    max_steps=STEPS + 10,
    max_tokens_per_step=64,
)


class ActivityTimes(temporalio.client.Interceptor, temporalio.worker.Interceptor):
    """Wall time of every activity execution (local ones included), by activity type."""

    def __init__(self) -> None:
        self.times: dict[str, list[float]] = defaultdict(list)
        self._lock = threading.Lock()

    def intercept_activity(
        self, next: temporalio.worker.ActivityInboundInterceptor
    ) -> temporalio.worker.ActivityInboundInterceptor:
        return _Timed(next, self)

    def take(self) -> dict[str, list[float]]:
        with self._lock:
            taken, self.times = self.times, defaultdict(list)
        return taken


class _Timed(temporalio.worker.ActivityInboundInterceptor):
    def __init__(self, next: temporalio.worker.ActivityInboundInterceptor, times: ActivityTimes) -> None:
        super().__init__(next)
        self._times = times

    async def execute_activity(self, input: temporalio.worker.ExecuteActivityInput) -> Any:
        from temporalio import activity

        name = activity.info().activity_type + (" (local)" if activity.info().is_local else "")
        t0 = time.perf_counter()
        try:
            return await self.next.execute_activity(input)
        finally:
            elapsed = time.perf_counter() - t0
            with self._times._lock:
                self._times.times[name].append(elapsed)


class RequestCounter:
    """ASGI wrapper counting the API's requests by method and route shape."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.counts: Counter[str] = Counter()

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            path = scope["path"]
            if path.startswith("/v1/nodes/") and "/steps/" in path:
                path = "/v1/nodes/{id}/steps/" + path.rsplit("/", 1)[1]
            elif path.startswith("/v1/nodes/") and path.endswith("/heartbeat"):
                path = "/v1/nodes/{id}/heartbeat"
            self.counts[f"{scope['method']} {path}"] += 1
        await self.app(scope, receive, send)

    def take(self) -> Counter[str]:
        taken, self.counts = self.counts, Counter()
        return taken


class ApiThread:
    """The control-plane API on a loopback port, on its own thread and event loop (as its own process would be)."""

    def __init__(self, app: Any) -> None:
        import uvicorn

        self._sock = listening_socket("127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self._server = uvicorn.Server(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=1))
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True)

    def __enter__(self) -> ApiThread:
        self._thread.start()
        deadline = time.monotonic() + 60
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the API did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._sock.close()


async def _run_task(client: Client, store: Store, queue: str, tool_steps: int) -> tuple[TaskState, Any]:
    state = await run_task(client, store, AGENT, queue, tool_steps)
    return state, await client.get_workflow_handle(state.task_id).fetch_history()


def _history_ms_per_step(history: Any) -> dict[str, float]:
    """From the task's history, ms per step: each activity type's wait for a worker (scheduled → started)
    and run (started → closed), and the workflow tasks' the same (a workflow task's run includes the
    local activities it ran)."""
    from temporalio.api.enums.v1 import EventType

    at = {e.event_id: e.event_time.ToDatetime() for e in history.events}
    names: dict[int, str] = {}
    started: dict[int, int] = {}  # scheduled event id → started event id
    totals: Counter[str] = Counter()
    tasks = 0
    for e in history.events:
        kind = e.event_type
        if kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            names[e.event_id] = e.activity_task_scheduled_event_attributes.activity_type.name
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            sched = e.activity_task_started_event_attributes.scheduled_event_id
            started[sched] = e.event_id
            totals[f"{names[sched]} wait"] += (at[e.event_id] - at[sched]).total_seconds()
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            sched = e.activity_task_completed_event_attributes.scheduled_event_id
            totals[f"{names[sched]} run"] += (at[e.event_id] - at[started[sched]]).total_seconds()
        elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
            sched = e.workflow_task_started_event_attributes.scheduled_event_id
            totals["workflow task wait"] += (at[e.event_id] - at[sched]).total_seconds()
        elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            totals["workflow task run"] += (
                at[e.event_id] - at[e.workflow_task_completed_event_attributes.started_event_id]
            ).total_seconds()
            tasks += 1
    return {
        **{k: round(1000 * v / STEPS, 2) for k, v in sorted(totals.items())},
        "workflow tasks per step": round(tasks / STEPS, 2),
    }


async def _timed(client: Client, store: Store, queue: str, times: ActivityTimes, requests: RequestCounter) -> dict:
    times.take()
    requests.take()
    t0 = time.perf_counter()
    state, history = await _run_task(client, store, queue, STEPS - 1)
    elapsed = time.perf_counter() - t0
    assert state.step == STEPS
    return {
        "s": elapsed,
        "events": len(history.events),
        "history": _history_ms_per_step(history),
        "activities": times.take(),
        "requests": requests.take(),
    }


def _ms_per_step(values: list[float]) -> float:
    return round(1000 * sum(values) / STEPS, 2)


async def main() -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="berth-bench-fleet-"))
    port = _free_port()
    engine = subprocess.Popen(
        [sys.executable, "-m", "orchestrator.engines.simulated", "--port", str(port), "--latency-scale", "0"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=str(Path(sys.executable).parent / "temporal"), data_converter=pydantic_data_converter
    )
    times = ActivityTimes()
    rounds: list[dict[str, dict]] = []
    try:
        await _wait(f"http://127.0.0.1:{port}/health")
        address = env.client.service_client.config.target_host
        config = BerthConfig(
            data_dir=tmp,
            engine_url=f"http://127.0.0.1:{port}/v1",
            join_token=JOIN_TOKEN,
            database_url=f"sqlite:///{tmp / 'berth.db'}",
            temporal_address=address,
            engine_latency_scale=0,
        )
        store = Store.open(config.resolved_database_url)  # the worker's; the API opens its own, as its process would
        store.agents.register(AGENT.spec())
        api_store = Store.open(config.resolved_database_url)
        requests = RequestCounter(create_app(config, api_store, TemporalGateway(address, config.temporal_namespace)))
        client = await Client.connect(address, data_converter=pydantic_data_converter, interceptors=[times])
        pool = PoolService(store, ModelCatalogue(config, store.models), sync_every_s=1.0)

        with ApiThread(requests) as api:
            discovery = SimulatedDiscovery(parse_simulate("1xH100-80GB"), NODE_ID)
            replicas = ReplicaManager(
                WeightsCache(tmp / "node" / "cache", 200 * 2**30),
                {
                    "simulated": SimulatedReplicaEngine(
                        load_time_scale=0.0, latency_scale=0.0, log_dir=tmp / "node" / "replica-logs"
                    )
                },
                gpu_indexes={0},
            )
            control_plane = ControlPlane(api.url)
            admitted = store.node_admission.mint(NODE_ID, 600).join_token  # the cluster token would leave it pending
            agent = NodeAgent(
                NodeOptions(node_id=NODE_ID, join_token=admitted, cache_dir=tmp / "node", heartbeat_s=1.0),
                discovery,
                control_plane,
                replicas,
            )
            await agent.join()
            serving = asyncio.create_task(agent.serve(client))
            try:
                async with contextlib.AsyncExitStack() as stack:
                    await stack.enter_async_context(build_worker(client, store, config, task_queue=DIRECT_QUEUE))
                    await stack.enter_async_context(
                        build_worker(client, store, config, task_queue=FLEET_QUEUE, pool=pool)
                    )
                    await stack.enter_async_context(tool_worker(client, AGENT))
                    await _run_task(client, store, DIRECT_QUEUE, 3)  # imports, tokenizer, connections
                    t0 = time.perf_counter()
                    await _run_task(client, store, FLEET_QUEUE, 3)  # its first step loads the replica
                    warm_up_s = time.perf_counter() - t0
                    await _run_task(client, store, FLEET_QUEUE, 3)  # the node's connections, warm replica
                    for _ in range(ROUNDS):
                        direct = await _timed(client, store, DIRECT_QUEUE, times, requests)
                        fleet = await _timed(client, store, FLEET_QUEUE, times, requests)
                        rounds.append({"direct": direct, "fleet": fleet})
            finally:
                agent.stopping.set()
                await serving
                await control_plane.close()
    finally:
        await env.shutdown()
        engine.terminate()
        engine.wait(10)

    def mean(values: list[float]) -> float:
        return sum(values) / len(values)

    direct_s = mean([r["direct"]["s"] for r in rounds])
    fleet_s = mean([r["fleet"]["s"] for r in rounds])
    last = rounds[-1]
    lease_ms = [
        (
            sum(r["fleet"]["activities"].get("berth.pool.acquire (local)", []))
            + sum(r["fleet"]["activities"].get("berth.pool.release (local)", []))
        )
        * 1000
        / STEPS
        for r in rounds
    ]
    node_requests = Counter({k: v for k, v in last["fleet"]["requests"].items() if "/v1/nodes/" in k})
    step_requests = sum(v for k, v in node_requests.items() if "/steps/" in k)
    heartbeats = sum(v for k, v in node_requests.items() if k.endswith("/heartbeat"))

    def activity_ms(kind: str) -> dict[str, float]:
        names = sorted({n for r in rounds for n in r[kind]["activities"]})
        return {
            n: round(mean([1000 * sum(r[kind]["activities"].get(n, [])) / STEPS for r in rounds]), 2) for n in names
        }

    def history_ms(kind: str) -> dict[str, float]:
        names = sorted({n for r in rounds for n in r[kind]["history"]})
        return {n: round(mean([r[kind]["history"].get(n, 0.0) for r in rounds]), 2) for n in names}

    figures = {
        "steps": STEPS,
        "model": MODEL,
        "rounds": ROUNDS,
        "replica_warm_up_task_s": round(warm_up_s, 2),
        "direct_task_s": [round(r["direct"]["s"], 3) for r in rounds],
        "fleet_task_s": [round(r["fleet"]["s"], 3) for r in rounds],
        "direct_ms_per_step": round(1000 * direct_s / STEPS, 2),
        "fleet_ms_per_step": round(1000 * fleet_s / STEPS, 2),
        "fleet_over_direct": round(fleet_s / direct_s, 3),
        "fleet_extra_ms_per_step": round(1000 * (fleet_s - direct_s) / STEPS, 2),
        "lease_ms_per_step": [round(v, 2) for v in lease_ms],
        "lease_note": "wall time of the acquire + release local activities' execution (pool call, thread hop); "
        "their scheduling is inside the workflow tasks and counted only in the totals",
        "direct_activity_ms_per_step": activity_ms("direct"),
        "fleet_activity_ms_per_step": activity_ms("fleet"),
        "history_note": "ms per step from the task's history: scheduled → started (wait) and started → "
        "closed (run) of each activity type and of the workflow tasks",
        "direct_history_ms_per_step": history_ms("direct"),
        "fleet_history_ms_per_step": history_ms("fleet"),
        "direct_history_events": rounds[-1]["direct"]["events"],
        "fleet_history_events": rounds[-1]["fleet"]["events"],
        "node_requests_last_fleet_task": dict(sorted(node_requests.items())),
        "node_step_requests_per_step": round(step_requests / STEPS, 2),
        "node_heartbeats_during_last_fleet_task": heartbeats,
    }
    path = write_results("fleet_step", figures)
    print(
        f"direct (control queue → engine), {STEPS} steps: {figures['direct_task_s']} s  "
        f"({figures['direct_ms_per_step']} ms/step)"
    )
    print(
        f"fleet (lease, node queue, API bookkeeping), {STEPS} steps: {figures['fleet_task_s']} s  "
        f"({figures['fleet_ms_per_step']} ms/step)"
    )
    print(
        f"fleet/direct ratio:                  {figures['fleet_over_direct']:7.3f}  "
        f"(+{figures['fleet_extra_ms_per_step']} ms/step)"
    )
    print(f"lease (acquire + release execution):  {figures['lease_ms_per_step']} ms/step")
    print(
        f"node → API requests per step:         {figures['node_step_requests_per_step']} "
        f"(+{heartbeats} heartbeats in {last['fleet']['s']:.1f} s)"
    )
    print(
        f"generate activity: direct {figures['direct_activity_ms_per_step'].get('berth.generate')} ms/step, "
        f"on the node {figures['fleet_activity_ms_per_step'].get('berth.generate')} ms/step; "
        f"history events {figures['direct_history_events']} vs {figures['fleet_history_events']}"
    )
    print(f"(replica warm-up task: {figures['replica_warm_up_task_s']} s)")
    print(f"figures written to {path}")
    return figures


if __name__ == "__main__":
    asyncio.run(main())
