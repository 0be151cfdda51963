"""How fast a task resumes when the node serving it is killed, and how much work the kill costs it.

Two GPU nodes run as real `berth node` processes (simulated 1×H100, replicas at zero load time,
the engine at real simulated latency so a generation streams for a while), each with a warm
replica of "llama-3.2-1b" (the model's policy keeps two). The control plane runs in this process:
the API on a loopback port in a thread, the orchestrator worker with the pool, a tool worker,
a Temporal dev server. For each of KILLS tasks (30 tool steps and the answer):

- wait until the task has settled step 3, read which node served its last step, wait 0–300 ms
  (so some kills land mid-generation), then SIGKILL that node's agent and its replica processes
  (the machine is gone: no goodbye, no heartbeat);
- time to resume: from the kill to the first token of the task's next generation on the other
  node (that ledger row's write time − its duration + its TTFT);
- work lost: the task's ledger `lost_tokens` (what the cut generation had streamed, booked from
  its last heartbeat) and the resume time, against (a) restarting the whole task as a Kubernetes
  Job would (every prompt and completion token before the kill again, and the wall time since the
  task started) and (b) restarting only the interrupted step (its prompt and completion);
- restart the killed node (it rejoins with its node secret), wait for two warm replicas again, and
  check the task completed.

Each kill also reads the task's history: when the generate activity timed out (and which timeout),
and when the next one started on the other node, which says where a slow resume went.

    python -m benchmarks.resume_time
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from sqlmodel import Session, col, select  # noqa: E402
from temporalio.client import Client  # noqa: E402
from temporalio.contrib.pydantic import pydantic_data_converter  # noqa: E402
from temporalio.testing import WorkflowEnvironment  # noqa: E402

from orchestrator.api import TemporalGateway, create_app  # noqa: E402
from orchestrator.catalogue import ModelCatalogue  # noqa: E402
from orchestrator.config import BerthConfig  # noqa: E402
from orchestrator.pool.autoscaler import Autoscaler  # noqa: E402
from orchestrator.pool.service import PoolService  # noqa: E402
from orchestrator.store import Store  # noqa: E402
from orchestrator.store.tables import LedgerRow  # noqa: E402
from orchestrator.worker import build_worker  # noqa: E402
from sdk import Agent, Budget, ScalingPolicy, TaskRun, TaskSpec, TaskState, TaskStatus, tool  # noqa: E402
from sdk._serve import tool_worker  # noqa: E402
from workflows.fleet_step import GENERATE_HEARTBEAT  # noqa: E402

from ._results import write_results  # noqa: E402
from ._tasks import topics  # noqa: E402
from .fleet_step import ApiThread  # noqa: E402

KILLS = 6
TOOL_STEPS = 30
KILL_AFTER_STEP = 3
KILL_JITTER_S = 0.3
MODEL = "llama-3.2-1b"
NODES = ("bench-a", "bench-b")
JOIN_TOKEN = "bench-join-token"
QUEUE = "bench-resume"
GOAL_S = GENERATE_HEARTBEAT.total_seconds() + 1.0  # the heartbeat timeout, and a second to place and start
RESUME_WAIT_S = 90.0
WARM_WAIT_S = 120.0


@tool
def observe(topic: str) -> str:
    """Return an observation about the topic."""
    return f"observed {topic}"


AGENT = Agent("bench-resume-agent", MODEL, "Observe each topic, then answer.", [observe],
              max_steps=TOOL_STEPS + 10, max_tokens_per_step=256)


class NodeProcess:
    """One `berth node` process on simulated GPUs; `kill` takes it and its replicas down as a lost machine would go."""

    def __init__(self, node_id: str, tmp: Path, env: dict[str, str]) -> None:
        self.node_id = node_id
        self.cache_dir = tmp / node_id
        self.log = tmp / f"{node_id}.log"
        self.env = env
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "orchestrator.cli.main", "node", "--node-id", self.node_id,
                 "--simulate", "1xH100-80GB", "--datacenter", "east", "--zone", "east-1a",
                 "--load-time-scale", "0", "--heartbeat-s", "1", "--cache-dir", str(self.cache_dir)],
                env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def replica_pids(self) -> list[int]:
        out = subprocess.run(["pgrep", "-f", str(self.cache_dir / "replica-logs")], capture_output=True, text=True)
        return [int(p) for p in out.stdout.split() if int(p) != os.getpid()]

    def kill(self) -> tuple[float, float, int]:
        """SIGKILL the agent and its replicas; (monotonic, wall time) of the kill and how many replicas died."""
        assert self.proc is not None
        replicas = self.replica_pids()
        at_mono, at_wall = time.monotonic(), time.time()
        for pid in [self.proc.pid, *replicas]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.proc.wait(10)
        return at_mono, at_wall, len(replicas)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        for pid in self.replica_pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@dataclass
class Kill:
    task_id: str
    node_id: str
    step_before: int
    jitter_s: float
    at_wall: float
    task_started_wall: float
    replicas_killed: int
    resumed: dict = field(default_factory=dict)


def _ledger_rows(store: Store, task_id: str) -> list[LedgerRow]:
    """The task's ledger rows with their write time, which `SqlTokenLedger.entries` does not return."""
    with Session(store.engine) as session:
        return list(session.exec(select(LedgerRow).where(LedgerRow.task_id == task_id)
                                 .order_by(col(LedgerRow.id))).all())


def _wall(at: datetime) -> float:
    return (at if at.tzinfo else at.replace(tzinfo=timezone.utc)).timestamp()


def _node_of(served_by: str) -> str:
    return served_by.split("/", 1)[0]


async def _two_warm(store: Store, autoscaler: Autoscaler, nodes: dict[str, NodeProcess],
                    stale: frozenset[str] = frozenset()) -> float:
    """Tick the scaler every second until each node has a warm replica; seconds it took.

    `stale`: replica ids of a killed node, still listed until its restarted agent's first heartbeat.
    Placement may well put the second replica beside the first (one GPU has room for both), so while a
    node lacks one the others are drained (nothing new is placed there; what they run goes on).
    """
    t0 = time.monotonic()
    try:
        while time.monotonic() - t0 < WARM_WAIT_S:
            alive = {n for n, p in nodes.items() if p.proc is not None and p.proc.poll() is None}
            replicas = [r for r in store.fleet.replicas(MODEL) if r.replica_id not in stale]
            warm = {r.node_id for r in replicas if r.state == "warm"}
            if warm >= set(nodes) and alive == set(nodes):
                return time.monotonic() - t0
            placed = {r.node_id for r in replicas}
            lacking = (set(nodes) - placed) & alive
            for node_id in placed & set(nodes):
                if lacking:
                    store.fleet.drain(node_id)
                else:
                    store.fleet.undrain(node_id)
            await autoscaler.tick()
            await asyncio.sleep(1.0)
    finally:
        for node_id in nodes:
            with contextlib.suppress(Exception):  # a node not yet registered
                store.fleet.undrain(node_id)
    raise TimeoutError(f"no warm replica of {MODEL} on each of {sorted(nodes)} after {WARM_WAIT_S:.0f} s: "
                       f"{[(r.node_id, r.replica_id, r.state) for r in store.fleet.replicas(MODEL)]}")


async def _start_task(client: Client, store: Store) -> tuple[str, float]:
    task_id = f"bench-resume-{os.urandom(5).hex()}"
    spec = TaskSpec(task_id=task_id, agent=AGENT.name, input=topics(TOOL_STEPS), budget=Budget(5_000_000))
    run = TaskRun(task_id=task_id, spec=spec, agent=store.agents.get(AGENT.name),
                  submitted_at=datetime.now(timezone.utc))
    started = time.time()
    await client.start_workflow("AgentTaskWorkflow", run, id=task_id, task_queue=QUEUE)
    return task_id, started


async def _kill_during(client: Client, store: Store, nodes: dict[str, NodeProcess]) -> Kill:
    task_id, started = await _start_task(client, store)
    deadline = time.monotonic() + 60
    while True:
        settled = [r for r in _ledger_rows(store, task_id) if r.kind == "settled"]
        if settled and max(r.step for r in settled) >= KILL_AFTER_STEP:
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"{task_id} did not reach step {KILL_AFTER_STEP}")
        await asyncio.sleep(0.02)
    last = settled[-1]
    node_id = _node_of(last.served_by)
    jitter = random.uniform(0.0, KILL_JITTER_S)
    await asyncio.sleep(jitter)
    _, at_wall, replicas = nodes[node_id].kill()
    return Kill(task_id, node_id, last.step, round(jitter, 3), at_wall, started, replicas)


async def _resumed(store: Store, kill: Kill) -> dict:
    """The task's first generation settled after the kill on another node, and what the kill cost it."""
    deadline = time.monotonic() + RESUME_WAIT_S
    while True:
        rows = _ledger_rows(store, kill.task_id)
        after = [r for r in rows if r.kind == "settled" and _node_of(r.served_by) != kill.node_id
                 and _wall(r.created_at) > kill.at_wall]
        if after:
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"{kill.task_id} did not resume within {RESUME_WAIT_S:.0f} s of the kill")
        await asyncio.sleep(0.05)
    first = after[0]
    first_token = _wall(first.created_at) - first.duration_s + first.ttft_s
    before = [r for r in rows if r.kind == "settled" and _wall(r.created_at) <= kill.at_wall]
    lost_rows = [r for r in rows if r.kind == "lost"]
    lost = sum(r.completion_tokens for r in lost_rows)
    return {
        "resume_s": round(first_token - kill.at_wall, 3),
        "resumed_step": first.step,
        "resumed_on": first.served_by,
        "lost_rows": len(lost_rows),
        "lost_tokens_ledger": lost,
        "resumed_step_prompt_tokens": first.prompt_tokens,
        "resumed_step_completion_tokens": first.completion_tokens,
        # (a) a Job restart redoes every call before the kill (prompt and completion) and the cut one
        "job_restart_tokens": sum(r.prompt_tokens + r.completion_tokens for r in before) + lost,
        "job_restart_wall_s": round(kill.at_wall - kill.task_started_wall, 3),
        "steps_settled_at_kill": max((r.step for r in before), default=0),
        # (b) restarting the interrupted step redoes its prompt and completion
        "step_restart_tokens": first.prompt_tokens + first.completion_tokens,
        "calls_before_kill": len(before),
    }


def _history_after(history: Any, kill: Kill) -> dict:
    """From the task's history: the first activity timeout after the kill (which kind, when) and the first
    generate started afterwards on another node's queue, as seconds from the kill."""
    from temporalio.api.enums.v1 import EventType, TimeoutType

    scheduled: dict[int, tuple[str, str]] = {}
    out: dict[str, Any] = {}
    for e in history.events:
        t = e.event_time.ToDatetime().replace(tzinfo=timezone.utc).timestamp() - kill.at_wall
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            a = e.activity_task_scheduled_event_attributes
            scheduled[e.event_id] = (a.activity_type.name, a.task_queue.name)
        elif e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT and t > 0 and "timed_out_s" not in out:
            a = e.activity_task_timed_out_event_attributes
            name, queue = scheduled.get(a.scheduled_event_id, ("?", "?"))
            timeout = a.failure.timeout_failure_info.timeout_type
            out.update(timed_out_s=round(t, 3), timed_out_activity=name, timed_out_queue=queue,
                       timeout=TimeoutType.Name(timeout).removeprefix("TIMEOUT_TYPE_").lower())
        elif e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED and t > 0 and "next_started_s" not in out:
            name, queue = scheduled.get(e.activity_task_started_event_attributes.scheduled_event_id, ("?", "?"))
            if "generate" in name and queue.startswith("node/") and queue != f"node/{kill.node_id}":
                out.update(next_started_s=round(t, 3), next_started_queue=queue)
    return out


def _first_generate_after(history: Any, kill: Kill) -> dict:
    """Where the task's first generate scheduled after the kill went (the node it was leased to)."""
    from temporalio.api.enums.v1 import EventType

    for e in history.events:
        t = e.event_time.ToDatetime().replace(tzinfo=timezone.utc).timestamp() - kill.at_wall
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED and t > 0:
            a = e.activity_task_scheduled_event_attributes
            if "generate" in a.activity_type.name:
                return {"first_generate_scheduled_after_kill_s": round(t, 3),
                        "first_generate_scheduled_queue": a.task_queue.name}
    return {}


async def main() -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="berth-bench-resume-"))
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=str(Path(sys.executable).parent / "temporal"), data_converter=pydantic_data_converter)
    nodes: dict[str, NodeProcess] = {}
    kills: list[Kill] = []
    try:
        address = env.client.service_client.config.target_host
        config = BerthConfig(data_dir=tmp, join_token=JOIN_TOKEN, database_url=f"sqlite:///{tmp / 'berth.db'}",
                             temporal_address=address)
        store = Store.open(config.resolved_database_url)
        store.agents.register(AGENT.spec())
        api_store = Store.open(config.resolved_database_url)
        client = env.client
        catalogue = ModelCatalogue(config, store.models)
        pool = PoolService(store, catalogue, sync_every_s=1.0, node_lost_after_s=config.node_lost_after_s)
        assert store.models.set_policy(MODEL, ScalingPolicy(min_replicas=2)) is not None, MODEL
        autoscaler = Autoscaler(pool, client, task_queue=QUEUE)

        with ApiThread(create_app(config, api_store, TemporalGateway(address, config.temporal_namespace))) as api:
            node_env = {**os.environ, "BERTH_JOIN_TOKEN": JOIN_TOKEN, "BERTH_API_URL": api.url,
                        "BERTH_TEMPORAL_ADDRESS": address, "BERTH_ENGINE_LATENCY_SCALE": "1.0",
                        "BERTH_DATA_DIR": str(tmp / "node-data")}
            nodes = {n: NodeProcess(n, tmp, node_env) for n in NODES}
            for node in nodes.values():
                node.start()
            async with contextlib.AsyncExitStack() as stack:
                await stack.enter_async_context(build_worker(client, store, config, task_queue=QUEUE, pool=pool))
                await stack.enter_async_context(tool_worker(client, AGENT))
                while len(store.fleet.list(status="healthy")) < len(nodes):  # both joined: the scaler spreads
                    await asyncio.sleep(0.5)
                first_warm_s = await _two_warm(store, autoscaler, nodes)
                rewarm_s: list[float] = []
                for i in range(KILLS):
                    kill = await _kill_during(client, store, nodes)
                    stale = frozenset(r.replica_id for r in store.fleet.replicas(MODEL) if r.node_id == kill.node_id)
                    kill.resumed = await _resumed(store, kill)
                    nodes[kill.node_id].start()  # the machine comes back and rejoins with its node secret
                    handle = client.get_workflow_handle(kill.task_id, result_type=TaskState)
                    state = await handle.result()
                    if state.status != TaskStatus.completed:
                        raise RuntimeError(f"{kill.task_id} ended {state.status}: {state.error}")
                    totals = store.ledger.totals(kill.task_id)
                    history = await handle.fetch_history()
                    events = store.events.read(kill.task_id, limit=10_000)
                    interruptions = [e.data for e in events if e.kind == "interruption"]
                    kill.resumed.update(
                        task_status=state.status.value, task_steps=state.step, lost_tokens_task=totals.lost_tokens,
                        interruption_events=len(interruptions),
                        interruption=({k: interruptions[0].get(k) for k in ("kind", "tokens_lost", "resume_s",
                                                                           "resumed_on", "step")}
                                      if interruptions else None),
                        history=_history_after(history, kill) | _first_generate_after(history, kill))
                    # a heartbeat timeout: the generate was running on the killed node; schedule-to-start:
                    # the kill fell between steps and the next step was leased to the dead node's replica
                    kill.resumed["generate_running_at_kill"] = kill.resumed["history"].get("timeout") == "heartbeat"
                    kills.append(kill)
                    r = kill.resumed
                    print(f"kill {i + 1}: {kill.node_id} after step {kill.step_before} (+{kill.jitter_s * 1000:.0f} ms)"
                          f" → first token on {_node_of(r['resumed_on'])} in {r['resume_s']:.2f} s; lost "
                          f"{r['lost_tokens_ledger']} tokens; interruption {r['interruption']}; history "
                          f"{r['history']}", flush=True)
                    rewarm_s.append(round(await _two_warm(store, autoscaler, nodes, stale), 2))
    finally:
        for node in nodes.values():
            node.stop()
        await env.shutdown()

    resume = [k.resumed["resume_s"] for k in kills]
    berth_tokens = sum(k.resumed["lost_tokens_task"] for k in kills)
    job_tokens = sum(k.resumed["job_restart_tokens"] for k in kills)
    step_tokens = sum(k.resumed["step_restart_tokens"] for k in kills)
    job_wall = sum(k.resumed["job_restart_wall_s"] for k in kills)
    figures = {
        "kills": len(kills),
        "model": MODEL,
        "tool_steps": TOOL_STEPS,
        "heartbeat_timeout_s": GENERATE_HEARTBEAT.total_seconds(),
        "goal_resume_s": GOAL_S,
        "resume_s": resume,
        "resume_p50_s": round(statistics.median(resume), 3),
        "resume_max_s": max(resume),
        "within_goal": sum(1 for s in resume if s <= GOAL_S),
        "kills_mid_generation": sum(1 for k in kills if k.resumed["generate_running_at_kill"]),
        "resume_by_timeout_s": {t: [k.resumed["resume_s"] for k in kills if k.resumed["history"].get("timeout") == t]
                                for t in sorted({str(k.resumed["history"].get("timeout")) for k in kills})},
        "berth_lost_tokens": berth_tokens,
        "berth_lost_tokens_note": "ledger lost_tokens: completion tokens the cut generation had streamed (from its "
                                  "last heartbeat); the resumed step prefills its prompt again on the new replica",
        "berth_prefill_again_tokens": sum(k.resumed["resumed_step_prompt_tokens"] for k in kills),
        "job_restart_tokens": job_tokens,
        "step_restart_tokens": step_tokens,
        "berth_over_job_restart_tokens": round(berth_tokens / job_tokens, 4) if job_tokens else None,
        "berth_over_step_restart_tokens": round(berth_tokens / step_tokens, 4) if step_tokens else None,
        "berth_wall_lost_s": round(sum(resume), 3),
        "job_restart_wall_lost_s": round(job_wall, 3),
        "berth_over_job_restart_wall": round(sum(resume) / job_wall, 3) if job_wall else None,
        "job_restart_wall_note": "the task's elapsed time at the kill only; a Job restart must also notice the "
                                 "machine is gone, which this baseline leaves out",
        "job_restart_wall_with_same_detection_s": round(job_wall + sum(resume), 3),
        "first_two_warm_s": round(first_warm_s, 2),
        "rewarm_after_restart_s": rewarm_s,
        "per_kill": [{"task_id": k.task_id, "node": k.node_id, "after_step": k.step_before, "jitter_s": k.jitter_s,
                      "replicas_killed": k.replicas_killed, **k.resumed} for k in kills],
    }
    path = write_results("resume_time", figures)
    print(f"time to resume (SIGKILL → first token on the other node), {len(kills)} kills: "
          f"p50 {figures['resume_p50_s']:.2f} s, max {figures['resume_max_s']:.2f} s "
          f"(goal ≤ {GOAL_S:.0f} s: heartbeat timeout + 1 s; {figures['within_goal']}/{len(kills)} within)")
    print(f"kills with the generate running on the node (heartbeat timeout): {figures['kills_mid_generation']}/"
          f"{len(kills)}; resume by timeout: {figures['resume_by_timeout_s']}")
    print(f"tokens regenerated: Berth {berth_tokens} (lost) vs Job restart {job_tokens} "
          f"({figures['berth_over_job_restart_tokens']}) vs step restart {step_tokens} "
          f"({figures['berth_over_step_restart_tokens']})")
    print(f"wall time lost: Berth {figures['berth_wall_lost_s']} s vs Job restart {figures['job_restart_wall_lost_s']} s "
          f"({figures['berth_over_job_restart_wall']}; the Job baseline without its own detection time)")
    print(f"figures written to {path}")
    return figures


if __name__ == "__main__":
    asyncio.run(main())
