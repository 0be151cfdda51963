"""Many short agent tasks at once on the embedded stack: do they all finish, within budget, leaving no lease?

`berth up` runs as a real process tree (Temporal dev server, API server, orchestrator worker, the
sample agents' tool worker, two simulated GPU nodes and their replicas) on free loopback ports in
a temp dir, as the system tests start it. The fleet is two nodes with one H100 each: on a 2-core
machine every node is another process competing for CPU, but a step whose generation a busy node
did not pick up in time (taken for a lost node) then has another node to go to. "llama-3.2-1b"
keeps one warm replica and may grow to four, each serving up to 256 sequences at once (vLLM's
default `max_num_seqs`; the catalogue's default of 32 suits an 8B model, and more replicas would
be more processes on the two cores). The engine runs at its real simulated latency (a 1B model
streams quickly, so a task is mostly Berth's own work).

Each task is the `research` sample agent on one subject (a search, a note, then the answer: three
steps, two tool calls) with a 20,000-token budget, submitted through the SDK.

- baseline: BASELINE_TASKS of them one at a time, each waited for before the next;
- load: all N submitted at once (one burst through the SDK), then waited for.

Then it checks what must hold under load: every task completed; each task's spend and its ledger
stay within its budget; every tool call ran once (the tools' journal holds each idempotency key
once); no lease is left, neither in the store nor on a replica (after a short wait for the node's
next heartbeat). Reported: steps/s (all steps over the wall time from the first submit to the
last completion), tasks/s, p50/p99 task latency (the client's submit to the completion the
workflow recorded), against the baseline's.

With `--cpu-hogs N` the burst runs beside N processes spinning on the CPU (`stress`-style load): the
figure that matters there is `interruptions`, steps cut off while every node was alive (the goal is 0).

    python -m benchmarks.load_run [--tasks N] [--cpu-hogs N --results load_run_hogs]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from orchestrator.demo.sample_agents import KNOWLEDGE
from orchestrator.store import Store
from sdk import Budget, Client, ScalingPolicy, TaskState, TaskStatus
from sdk.wire.identity import TenantSpec
from tests.system.conftest import Stack, fleet_stack, wait_until

from ._results import write_results

TASKS = 1000
BASELINE_TASKS = 10
MODEL = "llama-3.2-1b"
AGENT = "research"
BUDGET_TOKENS = 20_000
FLEET = [
    {"node_id": "gpu-load-a", "datacenter": "east", "zone": "east-1a", "gpus": "1xH100-80GB"},
    {"node_id": "gpu-load-b", "datacenter": "east", "zone": "east-1b", "gpus": "1xH100-80GB"},
]
# One replica warm before anything is timed, so the baseline does not pay for a cold load.
POLICY = ScalingPolicy(min_replicas=1, max_replicas=4)
MAX_NUM_SEQS = 256
# The burst queues in the SDK's connection pool (100 connections) behind the server; a request
# may wait there for a while on 2 cores, which is load, not a dead API.
CLIENT_TIMEOUT_S = 300.0
POLL_S = 3.0  # each poll lists every task: polling harder takes CPU from the stack it measures
# Generous: a stuck task shows as a timeout naming it, not as a benchmark that never ends.
LOAD_DEADLINE_S = 1800.0
LEASES_GONE_WAIT_S = 30.0  # a few node heartbeats (2 s each in `berth up`)
LEDGER_READS_AT_ONCE = 16


def subject(i: int) -> str:
    keys = sorted(KNOWLEDGE)
    return keys[i % len(keys)]


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0–100) by nearest rank: p99 of 1000 values is the 990th smallest."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))
    return ordered[int(rank) - 1]


def completed_at(state: TaskState) -> float:
    """When the workflow recorded the task's final state (wall clock of this machine)."""
    assert state.updated_at is not None, state.task_id
    return state.updated_at.timestamp()


async def run_baseline(client: Client, count: int) -> dict:
    """`count` tasks one after another, each alone on the stack.

    Its steps/s is over the tasks' own latencies: `result()` learns of the end from the event
    stream, which ends about a second after the task (it polls, and looks twice more once final),
    and that wait between tasks is the SDK's, not the stack's.
    """
    latencies, steps = [], 0
    for i in range(count):
        sent = time.time()
        handle = await client.submit(
            AGENT, subject(i), budget=Budget(tokens=BUDGET_TOKENS), model=MODEL, tenant="baseline"
        )
        await handle.result()
        state = await handle.status()
        latencies.append(completed_at(state) - sent)
        steps += state.step
    busy = sum(latencies)
    return {
        "tasks": count,
        "steps": steps,
        "busy_s": round(busy, 2),
        "steps_per_s": round(steps / busy, 2),
        "latency_p50_s": round(statistics.median(latencies), 3),
        "latency_max_s": round(max(latencies), 3),
    }


async def submit_all(client: Client, count: int) -> tuple[dict[str, float], list[float]]:
    """Submit `count` tasks at once; each task's id → when its submit was sent, and each submit's duration."""

    async def one(i: int) -> tuple[str, float, float]:
        sent = time.time()
        handle = await client.submit(
            AGENT, subject(i), budget=Budget(tokens=BUDGET_TOKENS), model=MODEL, tenant="load", task_id=f"load-{i:05d}"
        )
        return handle.task_id, sent, time.time() - sent

    submitted = await asyncio.gather(*(one(i) for i in range(count)))
    return {task_id: sent for task_id, sent, _ in submitted}, [took for _, _, took in submitted]


async def wait_final(client: Client, task_ids: set[str], deadline_s: float) -> dict[str, TaskState]:
    """Poll the task list (stored states, no Temporal queries) until every task is final."""
    final: dict[str, TaskState] = {}
    deadline = time.monotonic() + deadline_s
    last_report = time.monotonic()
    while True:
        seen: dict[str, TaskState] = {}
        offset = 0
        while True:
            page = await client.tasks(tenant="load", limit=500, offset=offset)
            seen.update((s.task_id, s) for s in page)
            if len(page) < 500:
                break
            offset += 500
        final = {i: s for i, s in seen.items() if i in task_ids and s.status.is_final}
        if len(final) == len(task_ids):
            return final
        if time.monotonic() > deadline:
            pending = Counter(s.status.value for i, s in seen.items() if i not in final)
            raise TimeoutError(
                f"{len(task_ids) - len(final)} tasks not final after {deadline_s:.0f} s: {dict(pending)}"
            )
        if time.monotonic() - last_report > 15:
            last_report = time.monotonic()
            print(f"  {len(final)}/{len(task_ids)} final", flush=True)
        await asyncio.sleep(POLL_S)


async def ledger_over_budget(client: Client, states: dict[str, TaskState]) -> list[str]:
    """Tasks whose ledger (prompt + completion + lost tokens) is above their budget."""
    gate = asyncio.Semaphore(LEDGER_READS_AT_ONCE)

    async def over(task_id: str) -> bool:
        async with gate:
            totals = (await client.task(task_id).ledger()).totals
        return totals.prompt_tokens + totals.completion_tokens + totals.lost_tokens > states[task_id].spend.token_limit

    flags = await asyncio.gather(*(over(t) for t in states))
    return [t for t, bad in zip(states, flags) if bad]


def tools_ran_twice(stack: Stack) -> list[str]:
    return [
        key
        for key, n in Counter(
            line.split()[0] for line in Path(stack.env["BERTH_TOOL_JOURNAL"]).read_text().splitlines()
        ).items()
        if n > 1
    ]


def interruptions_by_kind(stack: Stack, task_ids: set[str]) -> dict[str, int]:
    """The tasks' interruptions by kind, as their events recorded them. Nothing is killed in this run, so every one
    is a step cut off while all its nodes were alive: `stalled` (a busy node's generation went quiet) or worse,
    `lost` (a live node taken for a dead one)."""
    store = Store.open(f"sqlite:///{stack.data_dir / 'berth.db'}")
    kinds = Counter(
        e.data.get("kind", "?") for task_id in task_ids for e in store.events.read(task_id) if e.kind == "interruption"
    )
    return dict(sorted(kinds.items()))


def quiet_generations(stack: Stack, task_ids: set[str]) -> int:
    """Generations whose heartbeats went quiet on a live node and went on there (not cuts: `generation_quiet`)."""
    store = Store.open(f"sqlite:///{stack.data_dir / 'berth.db'}")
    return sum(1 for task_id in task_ids for e in store.events.read(task_id) if e.kind == "generation_quiet")


@contextlib.contextmanager
def cpu_hogs(count: int) -> Iterator[None]:
    """`stress`-style load: processes that spin on the CPU beside the stack, at the stack's own priority."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


def leases_left(stack: Stack) -> tuple[int, list[dict]]:
    """Lease rows still in the store, and replicas whose node still reports an active lease."""
    store = Store.open(f"sqlite:///{stack.data_dir / 'berth.db'}")
    busy = [r for r in stack.http.get("/v1/replicas", timeout=30).json() if r["active_leases"]]
    return len(store.leases.list()), busy


async def measure(stack: Stack, tasks: int, hogs: int) -> dict:
    async with Client(stack.api, api_key=stack.admin_key(), timeout=CLIENT_TIMEOUT_S) as client:
        entry = (await client.model(MODEL)).entry
        await client.put_model(
            entry.model_copy(update={"engine_args": {**entry.engine_args, "max_num_seqs": MAX_NUM_SEQS}})
        )
        await client.set_policy(MODEL, POLICY)
        for tenant in ("baseline", "load"):  # the baseline's tasks and the burst's are listed apart
            await client.create_tenant(TenantSpec(name=tenant))
        await asyncio.to_thread(
            wait_until,
            lambda: any(r["state"] == "warm" for r in stack.http.get("/v1/replicas", params={"model": MODEL}).json()),
            120,
            f"a warm replica of {MODEL}",
        )
        baseline = await run_baseline(client, BASELINE_TASKS)
        print(
            f"baseline: {BASELINE_TASKS} tasks one at a time, {baseline['steps_per_s']} steps/s, "
            f"p50 {baseline['latency_p50_s']} s",
            flush=True,
        )

        load_before = round(os.getloadavg()[0], 2)
        with cpu_hogs(hogs):
            t0 = time.time()
            sent, submit_s = await submit_all(client, tasks)
            burst_s = time.time() - t0
            print(f"submitted {tasks} tasks in {burst_s:.1f} s{f' beside {hogs} CPU hogs' if hogs else ''}", flush=True)
            states = await wait_final(client, set(sent), LOAD_DEADLINE_S)
            load_after = round(os.getloadavg()[0], 2)
        over_ledger = await ledger_over_budget(client, states)

    end = max(completed_at(s) for s in states.values())
    wall = end - t0
    steps = sum(s.step for s in states.values())
    latencies = [completed_at(states[t]) - at for t, at in sent.items()]
    not_completed = {t: f"{s.status.value}: {s.error}" for t, s in states.items() if s.status != TaskStatus.completed}
    over_spend = [t for t, s in states.items() if s.spend.tokens_used > s.spend.token_limit]
    twice = tools_ran_twice(stack)
    try:
        await asyncio.to_thread(wait_until, lambda: leases_left(stack) == (0, []), LEASES_GONE_WAIT_S, "no lease left")
    except TimeoutError:
        pass  # reported below with what is left
    lease_rows, busy_replicas = leases_left(stack)
    p50, p99 = statistics.median(latencies), percentile(latencies, 99)
    figures = {
        "tasks": tasks,
        "model": MODEL,
        "agent": AGENT,
        "fleet": FLEET,
        "scaling_policy": POLICY.model_dump(),
        "max_num_seqs": MAX_NUM_SEQS,
        "budget_tokens": BUDGET_TOKENS,
        "steps": steps,
        "wall_s": round(wall, 2),
        "steps_per_s": round(steps / wall, 2),
        "tasks_per_s": round(tasks / wall, 2),
        "latency_p50_s": round(p50, 3),
        "latency_p99_s": round(p99, 3),
        "latency_max_s": round(max(latencies), 3),
        "submit_burst_s": round(burst_s, 2),
        "submit_request_p50_s": round(statistics.median(submit_s), 3),
        "submit_request_p99_s": round(percentile(submit_s, 99), 3),
        "tokens_used_max": max(s.spend.tokens_used for s in states.values()),
        # Steps cut off and placed again. No node is killed here: each one is a cut while every node was alive,
        # which the step's evidence check is there to prevent (the goal is none).
        "interruptions": sum(s.interruptions for s in states.values()),
        "interruptions_by_kind": interruptions_by_kind(stack, set(states)),
        "quiet_generations_continued": quiet_generations(stack, set(states)),
        "cpu_hogs": hogs,
        "replicas_at_end": len(stack.http.get("/v1/replicas", params={"model": MODEL}, timeout=30).json()),
        # The machine is shared: the 1-minute load average before the burst and after the last task says
        # how much else was running (2 cores; the stack alone keeps it near 2 while it works).
        "load_average_before": load_before,
        "load_average_after": load_after,
        "baseline": baseline,
        "steps_per_s_over_baseline": round(steps / wall / baseline["steps_per_s"], 2),
        "latency_p50_over_baseline": round(p50 / baseline["latency_p50_s"], 2),
        "checks": {
            "not_completed": len(not_completed),
            "spend_over_budget": len(over_spend),
            "ledger_over_budget": len(over_ledger),
            "tool_calls_run_twice": len(twice),
            "lease_rows_left": lease_rows,
            "replicas_with_active_leases": len(busy_replicas),
        },
    }
    print(
        f"{tasks} tasks at once: {steps} steps in {wall:.1f} s = {figures['steps_per_s']} steps/s, "
        f"{figures['tasks_per_s']} tasks/s; latency p50 {p50:.2f} s, p99 {p99:.2f} s, max {max(latencies):.2f} s"
    )
    print(
        f"against {BASELINE_TASKS} tasks one at a time ({baseline['steps_per_s']} steps/s, p50 "
        f"{baseline['latency_p50_s']} s): {figures['steps_per_s_over_baseline']}× the steps/s, "
        f"{figures['latency_p50_over_baseline']}× the p50 latency"
    )
    print(f"checks: {figures['checks']}")
    problems = {
        "not completed": list(not_completed.items())[:5],
        "spend over budget": over_spend[:5],
        "ledger over budget": over_ledger[:5],
        "tool calls run twice": twice[:5],
        "busy replicas": busy_replicas[:5],
    }
    problems = {k: v for k, v in problems.items() if v}
    if problems or lease_rows:
        raise SystemExit(
            f"the load run broke what must hold (figures not written): {problems}, "
            f"{lease_rows} lease rows left; logs in {stack.data_dir / 'logs'}"
        )
    return figures


def main() -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=TASKS, help=f"tasks submitted at once (default {TASKS})")
    parser.add_argument("--cpu-hogs", type=int, default=0, help="processes spinning on the CPU during the burst")
    parser.add_argument("--results", default="load_run", help="the results file's name (benchmarks/results/NAME.json)")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="berth-bench-load-"))
    print(f"stack in {tmp}", flush=True)
    with fleet_stack(tmp, FLEET, latency_scale=1.0, load_time_scale=0.02) as stack:
        figures = asyncio.run(measure(stack, args.tasks, args.cpu_hogs))
    path = write_results(args.results, figures)
    print(f"figures written to {path}")
    return figures


if __name__ == "__main__":
    main()
