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
import os
import random
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from temporalio.client import Client  # noqa: E402

from orchestrator.store import Store  # noqa: E402
from sdk import Agent, Budget, TaskSpec, TaskState, TaskStatus  # noqa: E402
from sdk.wire.task_run import CURRENT_WORKFLOW_VERSION, TaskRun
from workflows.fleet_step import GENERATE_HEARTBEAT  # noqa: E402

from ._results import write_results  # noqa: E402
from ._tasks import observe, topics  # noqa: E402
from ._two_nodes import TwoNodes, ledger_rows, node_of, two_nodes, wall  # noqa: E402

KILLS = 6
TOOL_STEPS = 30
KILL_AFTER_STEP = 3
KILL_JITTER_S = 0.3
MODEL = "llama-3.2-1b"
QUEUE = "bench-resume"
GOAL_S = GENERATE_HEARTBEAT.total_seconds() + 1.0  # the heartbeat timeout, and a second to place and start
RESUME_WAIT_S = 90.0


AGENT = Agent(
    "bench-resume-agent",
    MODEL,
    "Observe each topic, then answer.",
    [observe],
    max_steps=TOOL_STEPS + 10,
    max_tokens_per_step=256,
)


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


async def _start_task(client: Client, store: Store) -> tuple[str, float]:
    task_id = f"bench-resume-{os.urandom(5).hex()}"
    spec = TaskSpec(task_id=task_id, agent=AGENT.name, input=topics(TOOL_STEPS), budget=Budget(5_000_000))
    run = TaskRun(
        task_id=task_id,
        spec=spec,
        agent=store.agents.get(AGENT.name),
        submitted_at=datetime.now(UTC),
        workflow_version=CURRENT_WORKFLOW_VERSION,
    )
    started = time.time()
    await client.start_workflow("AgentTaskWorkflow", run, id=task_id, task_queue=QUEUE)
    return task_id, started


async def _kill_during(fleet: TwoNodes) -> Kill:
    store = fleet.store
    task_id, started = await _start_task(fleet.client, store)
    deadline = time.monotonic() + 60
    while True:
        settled = [r for r in ledger_rows(store, task_id) if r.kind == "settled"]
        if settled and max(r.step for r in settled) >= KILL_AFTER_STEP:
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"{task_id} did not reach step {KILL_AFTER_STEP}")
        await asyncio.sleep(0.02)
    last = settled[-1]
    node_id = node_of(last.served_by)
    jitter = random.uniform(0.0, KILL_JITTER_S)
    await asyncio.sleep(jitter)
    at_wall, replicas = fleet.nodes[node_id].kill()
    return Kill(task_id, node_id, last.step, round(jitter, 3), at_wall, started, replicas)


async def _resumed(store: Store, kill: Kill) -> dict:
    """The task's first generation settled after the kill on another node, and what the kill cost it."""
    deadline = time.monotonic() + RESUME_WAIT_S
    while True:
        rows = ledger_rows(store, kill.task_id)
        after = [
            r
            for r in rows
            if r.kind == "settled" and node_of(r.served_by) != kill.node_id and wall(r.created_at) > kill.at_wall
        ]
        if after:
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"{kill.task_id} did not resume within {RESUME_WAIT_S:.0f} s of the kill")
        await asyncio.sleep(0.05)
    first = after[0]
    first_token = wall(first.created_at) - first.duration_s + first.ttft_s
    before = [r for r in rows if r.kind == "settled" and wall(r.created_at) <= kill.at_wall]
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
        t = e.event_time.ToDatetime().replace(tzinfo=UTC).timestamp() - kill.at_wall
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            a = e.activity_task_scheduled_event_attributes
            scheduled[e.event_id] = (a.activity_type.name, a.task_queue.name)
        elif e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT and t > 0 and "timed_out_s" not in out:
            a = e.activity_task_timed_out_event_attributes
            name, queue = scheduled.get(a.scheduled_event_id, ("?", "?"))
            timeout = a.failure.timeout_failure_info.timeout_type
            out.update(
                timed_out_s=round(t, 3),
                timed_out_activity=name,
                timed_out_queue=queue,
                timeout=TimeoutType.Name(timeout).removeprefix("TIMEOUT_TYPE_").lower(),
            )
        elif e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED and t > 0 and "next_started_s" not in out:
            name, queue = scheduled.get(e.activity_task_started_event_attributes.scheduled_event_id, ("?", "?"))
            if "generate" in name and queue.startswith("node/") and queue != f"node/{kill.node_id}":
                out.update(next_started_s=round(t, 3), next_started_queue=queue)
    return out


def _first_generate_after(history: Any, kill: Kill) -> dict:
    """Where the task's first generate scheduled after the kill went (the node it was leased to)."""
    from temporalio.api.enums.v1 import EventType

    for e in history.events:
        t = e.event_time.ToDatetime().replace(tzinfo=UTC).timestamp() - kill.at_wall
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED and t > 0:
            a = e.activity_task_scheduled_event_attributes
            if "generate" in a.activity_type.name:
                return {
                    "first_generate_scheduled_after_kill_s": round(t, 3),
                    "first_generate_scheduled_queue": a.task_queue.name,
                }
    return {}


async def main() -> dict:
    kills: list[Kill] = []
    async with two_nodes(Path(tempfile.mkdtemp(prefix="berth-bench-resume-")), AGENT, QUEUE) as fleet:
        rewarm_s: list[float] = []
        for i in range(KILLS):
            kill = await _kill_during(fleet)
            stale = fleet.replicas_on(kill.node_id)
            kill.resumed = await _resumed(fleet.store, kill)
            fleet.nodes[kill.node_id].start()  # the machine comes back and rejoins with its node secret
            handle = fleet.client.get_workflow_handle(kill.task_id, result_type=TaskState)
            state = await handle.result()
            if state.status != TaskStatus.completed:
                raise RuntimeError(f"{kill.task_id} ended {state.status}: {state.error}")
            totals = fleet.store.ledger.totals(kill.task_id)
            history = await handle.fetch_history()
            events = fleet.store.events.read(kill.task_id, limit=10_000)
            interruptions = [e.data for e in events if e.kind == "interruption"]
            kill.resumed.update(
                task_status=state.status.value,
                task_steps=state.step,
                lost_tokens_task=totals.lost_tokens,
                interruption_events=len(interruptions),
                interruption=(
                    {k: interruptions[0].get(k) for k in ("kind", "tokens_lost", "resume_s", "resumed_on", "step")}
                    if interruptions
                    else None
                ),
                history=_history_after(history, kill) | _first_generate_after(history, kill),
            )
            # a heartbeat timeout: the generate was running on the killed node; schedule-to-start:
            # the kill fell between steps and the next step was leased to the dead node's replica
            kill.resumed["generate_running_at_kill"] = kill.resumed["history"].get("timeout") == "heartbeat"
            kills.append(kill)
            r = kill.resumed
            print(
                f"kill {i + 1}: {kill.node_id} after step {kill.step_before} (+{kill.jitter_s * 1000:.0f} ms)"
                f" → first token on {node_of(r['resumed_on'])} in {r['resume_s']:.2f} s; lost "
                f"{r['lost_tokens_ledger']} tokens; interruption {r['interruption']}; history "
                f"{r['history']}",
                flush=True,
            )
            rewarm_s.append(round(await fleet.two_warm(stale), 2))

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
        "resume_by_timeout_s": {
            t: [k.resumed["resume_s"] for k in kills if k.resumed["history"].get("timeout") == t]
            for t in sorted({str(k.resumed["history"].get("timeout")) for k in kills})
        },
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
        "rewarm_after_restart_s": rewarm_s,
        "per_kill": [
            {
                "task_id": k.task_id,
                "node": k.node_id,
                "after_step": k.step_before,
                "jitter_s": k.jitter_s,
                "replicas_killed": k.replicas_killed,
                **k.resumed,
            }
            for k in kills
        ],
    }
    path = write_results("resume_time", figures)
    print(
        f"time to resume (SIGKILL → first token on the other node), {len(kills)} kills: "
        f"p50 {figures['resume_p50_s']:.2f} s, max {figures['resume_max_s']:.2f} s "
        f"(goal ≤ {GOAL_S:.0f} s: heartbeat timeout + 1 s; {figures['within_goal']}/{len(kills)} within)"
    )
    print(
        f"kills with the generate running on the node (heartbeat timeout): {figures['kills_mid_generation']}/"
        f"{len(kills)}; resume by timeout: {figures['resume_by_timeout_s']}"
    )
    print(
        f"tokens regenerated: Berth {berth_tokens} (lost) vs Job restart {job_tokens} "
        f"({figures['berth_over_job_restart_tokens']}) vs step restart {step_tokens} "
        f"({figures['berth_over_step_restart_tokens']})"
    )
    print(
        f"wall time lost: Berth {figures['berth_wall_lost_s']} s vs Job restart {figures['job_restart_wall_lost_s']} s "
        f"({figures['berth_over_job_restart_wall']}; the Job baseline without its own detection time)"
    )
    print(f"figures written to {path}")
    return figures


if __name__ == "__main__":
    asyncio.run(main())
