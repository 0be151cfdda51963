"""The Azure code trace, live: a minute of it on `berth up`, under Berth's placement and under k8s-spread.

The same invocation starts a fresh `berth up` twice on this machine (a real process tree on loopback
ports, as benchmarks/load_run.py starts it), once with `placement_policy=berth` and once with
`placement_policy=k8s-spread` (the Kubernetes Service + HPA baseline `berth simulate` compares with: the
very functions of orchestrator/pool/baselines.py), and replays the same calls on each.

Trace: the first `--seconds` of ../shared/traces/azure-llm-2023-code.csv (the Azure LLM inference trace
2023, code, from Patel et al., "Splitwise: Efficient generative LLM inference using phase splitting",
ISCA 2024, CC-BY 4.0; ../shared/traces/README.md), read with the simulator's `read_trace`.
Reduced scale: every round(1/scale)-th call, each at its own time offset and with its own prompt and output
size. Calls are thinned rather than shrunk because the simulated engine's time does not depend on the
prompt (TTFT is the model's figure, decode its tokens/s), so shrinking sizes would save nothing, while each
call is a task workflow, a lease and a streamed generation, and a 2-core machine running the whole stack
copes with about one such task a second beside everything else (the first minute holds 63 calls).

Each call is a one-step task of the `code-call` agent below, submitted through the SDK at its offset: its
input asks the simulated engine for an answer of the call's output length (`length: N tokens`) after a
prompt of the call's prompt size. Measured per call, from the task's "llm_call" event (the step's books):
- TTFT end to end: from the client's submit to the first token (the event's time minus its duration plus
  its engine TTFT): what a caller waits, Temporal and the control plane included;
- TTFT at the pool: the step's queue wait for a lease + its wait for the replica's load + the engine's TTFT
  (the part placement and scaling decide);
- TPOT: (duration - TTFT) / (completion tokens - 1), the engine's streaming as the activity saw it.
Attainment is the share of calls meeting the interactive defaults (sdk/wire/objectives.py) on TTFT and
TPOT; a call that did not complete misses. What the live engine does not model, unlike `berth simulate`:
speed by GPU type, prefill time by prompt length, co-residents slowing each other. Here the policies differ
in when a replica starts (at a step's acquire, or at the HPA's next tick), where (whole GPUs of the least
allocated node, weights from the origin), and how a step waits for it (joining a loading replica's lease,
or re-asking until a replica is ready).

    python -m benchmarks.live_trace [--seconds 60] [--scale 0.5] [--load-time-scale 0.25]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from orchestrator.simulator.trace import read_trace
from orchestrator.store import Store
from sdk import Agent, Budget, Client, TaskState, TaskStatus
from sdk.wire.identity import TenantSpec
from sdk.wire.objectives import DEFAULT_OBJECTIVES
from tests.system.conftest import AGENTS, fleet_stack

from ._results import write_results
from .load_run import CLIENT_TIMEOUT_S, percentile, wait_final

TRACE = Path(__file__).resolve().parents[1].parent / "shared" / "traces" / "azure-llm-2023-code.csv"
ATTRIBUTION = (
    "Azure LLM inference trace 2023 (code), Patel et al., 'Splitwise: Efficient generative LLM inference using"
    " phase splitting', ISCA 2024, CC-BY 4.0"
)
MODEL = "qwen2.5-7b"  # the model the converted trace names
POLICIES = ("berth", "k8s-spread")
# Two nodes of one H100 each, as load_run: every node and replica is another process on the 2 cores.
FLEET = [
    {"node_id": "gpu-trace-a", "datacenter": "east", "zone": "east-1a", "gpus": "1xH100-80GB"},
    {"node_id": "gpu-trace-b", "datacenter": "east", "zone": "east-1b", "gpus": "1xH100-80GB"},
]
TENANT = "load"  # load_run.wait_final lists this tenant's tasks
BUDGET_TOKENS = 100_000  # well above any first-minute call (7.4 k prompt tokens at most)
FINAL_DEADLINE_S = 600.0
OBJECTIVES = DEFAULT_OBJECTIVES["interactive"]

code_call = Agent(
    "code-call",
    model=MODEL,
    instructions="Complete the code.",
    max_steps=1,
    max_tokens_per_step=4096,
)
# What `berth up --agents` serves: the sample agents (the stack's readiness check looks for two of them) and this.
AGENTS_SERVED = f"{AGENTS},benchmarks.live_trace:TRACE_AGENTS"
TRACE_AGENTS = [code_call]


@dataclass(frozen=True)
class TraceCall:
    offset_s: float
    prompt_tokens: int
    output_tokens: int


def trace_calls(seconds: float, scale: float) -> list[TraceCall]:
    """The trace's calls in its first `seconds`, every round(1/scale)-th one, in arrival order."""
    every = max(round(1 / scale), 1)
    calls = sorted(
        (c for s in read_trace(TRACE).sessions for c in s.calls if c.not_before_s < seconds),
        key=lambda c: c.not_before_s,
    )
    return [TraceCall(c.not_before_s, c.prompt_tokens, c.output_tokens) for c in calls[::every]]


def call_input(call: TraceCall) -> str:
    """Asks the simulated engine for `output_tokens` after a prompt of about `prompt_tokens` (a word a token)."""
    return f"length: {max(call.output_tokens, 1)} tokens\n" + "code " * max(call.prompt_tokens - 40, 1)


async def replay(client: Client, calls: list[TraceCall], label: str) -> dict[str, float]:
    """Submit each call at its offset from now; each task's id → when its submit was sent (wall clock)."""
    t0 = time.monotonic()
    sent: dict[str, float] = {}

    async def one(i: int, call: TraceCall) -> None:
        await asyncio.sleep(max(t0 + call.offset_s - time.monotonic(), 0.0))
        at, budget = time.time(), Budget(tokens=BUDGET_TOKENS)
        handle = await client.submit(
            code_call.name, call_input(call), budget=budget, task_id=f"trace-{label}-{i:04d}", tenant=TENANT
        )
        sent[handle.task_id] = at  # the tenant's name prefixes the id

    await asyncio.gather(*(one(i, c) for i, c in enumerate(calls)))
    return sent


def call_figures(store: Store, task_id: str, sent_at: float, state: TaskState) -> dict:
    """One call's TTFT (end to end and at the pool), TPOT and whether it met the objectives."""
    events = [e for e in store.events.read(task_id) if e.kind == "llm_call"]
    if state.status != TaskStatus.completed or not events:
        return {"task_id": task_id, "completed": False, "met": False}
    event = events[-1]
    d = event.data
    ttft, duration, tokens = float(d["ttft_s"]), float(d["duration_s"]), int(d["completion_tokens"])
    first_token_at = event.at.timestamp() - duration + ttft
    e2e = first_token_at - sent_at
    pool = float(d.get("queue_wait_s") or 0.0) + float(d.get("load_s") or 0.0) + ttft
    tpot = (duration - ttft) / (tokens - 1) if tokens > 1 else 0.0
    return {
        "task_id": task_id,
        "completed": True,
        "ttft_s": round(e2e, 3),
        "ttft_at_pool_s": round(pool, 3),
        "tpot_s": round(tpot, 4),
        "queue_wait_s": d.get("queue_wait_s"),
        "load_s": d.get("load_s"),
        "tier": d.get("tier"),
        "node_id": d.get("node_id"),
        "attempts": len(events),
        "met": OBJECTIVES.met(e2e, tpot),
        "met_at_pool": OBJECTIVES.met(pool, tpot),
    }


def summary(calls: list[dict]) -> dict:
    done = [c for c in calls if c["completed"]]
    ttfts = [c["ttft_s"] for c in done]
    return {
        "calls": len(calls),
        "completed": len(done),
        "attainment": round(sum(c["met"] for c in calls) / len(calls), 3),
        "attainment_at_pool": round(sum(c.get("met_at_pool", False) for c in calls) / len(calls), 3),
        "ttft_p50_s": round(percentile(ttfts, 50), 3) if ttfts else None,
        "ttft_p90_s": round(percentile(ttfts, 90), 3) if ttfts else None,
        "ttft_at_pool_p50_s": round(percentile([c["ttft_at_pool_s"] for c in done], 50), 3) if done else None,
        "tpot_p50_s": round(percentile([c["tpot_s"] for c in done], 50), 4) if done else None,
        # What the pool made a call wait: for a lease (k8s-spread: until a replica is ready) and for a load.
        "queue_wait_p50_s": round(percentile([c["queue_wait_s"] or 0.0 for c in done], 50), 3) if done else None,
        "load_wait_p50_s": round(percentile([c["load_s"] or 0.0 for c in done], 50), 3) if done else None,
    }


async def measure(stack_api: str, admin_key: str, db: Path, calls: list[TraceCall], label: str) -> dict:
    async with Client(stack_api, api_key=admin_key, timeout=CLIENT_TIMEOUT_S) as client:
        await client.create_tenant(TenantSpec(name=TENANT))
        load_before = round(os.getloadavg()[0], 2)
        sent = await replay(client, calls, label)
        states = await wait_final(client, set(sent), FINAL_DEADLINE_S)
    store = Store.open(f"sqlite:///{db}")
    per_call = [call_figures(store, t, sent[t], states[t]) for t in sorted(sent)]
    return {**summary(per_call), "load_average_before": load_before, "per_call": per_call}


def run_policy(policy: str, calls: list[TraceCall], load_time_scale: float) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix=f"berth-bench-trace-{policy}-"))
    print(f"{policy}: stack in {tmp}", flush=True)
    env = {"BERTH_PLACEMENT_POLICY": policy}
    with fleet_stack(tmp, FLEET, env, agents=AGENTS_SERVED, latency_scale=1.0, load_time_scale=load_time_scale) as s:
        figures = asyncio.run(measure(s.api, s.admin_key(), s.data_dir / "berth.db", calls, policy))
    print(
        f"{policy}: {figures['completed']}/{figures['calls']} completed, attainment {figures['attainment']:.2f} "
        f"(at the pool {figures['attainment_at_pool']:.2f}), TTFT p50 {figures['ttft_p50_s']} s",
        flush=True,
    )
    return figures


def ratio(a: float, b: float) -> float | None:
    return round(a / b, 3) if b else None


def main() -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="how much of the trace, from its start")
    parser.add_argument("--scale", type=float, default=0.5, help="keep every round(1/scale)-th call (0 < scale <= 1)")
    parser.add_argument(
        "--load-time-scale", type=float, default=0.25, help="replica load times (berth up's default 0.25)"
    )
    parser.add_argument("--results", default="live_trace", help="the results file's name (benchmarks/results/NAME)")
    args = parser.parse_args()
    if not 0 < args.scale <= 1:
        raise SystemExit(f"--scale: must be in (0, 1], got {args.scale}")
    calls = trace_calls(args.seconds, args.scale)
    print(f"{len(calls)} calls from the first {args.seconds:.0f} s of the code trace (scale {args.scale})", flush=True)
    runs = {policy: run_policy(policy, calls, args.load_time_scale) for policy in POLICIES}
    berth, spread = runs["berth"], runs["k8s-spread"]
    figures = {
        "trace": "../shared/traces/azure-llm-2023-code.csv",
        "attribution": ATTRIBUTION,
        "seconds": args.seconds,
        "scale": args.scale,
        "thinning": "every round(1/scale)-th call, each at its own offset and size",
        "calls": len(calls),
        "model": MODEL,
        "fleet": FLEET,
        "load_time_scale": args.load_time_scale,
        "engine_latency_scale": 1.0,
        "objectives": OBJECTIVES.model_dump(),
        "attainment_berth_over_spread": ratio(berth["attainment"], spread["attainment"]),
        "attainment_at_pool_berth_over_spread": ratio(berth["attainment_at_pool"], spread["attainment_at_pool"]),
        "ttft_p50_spread_over_berth": ratio(spread["ttft_p50_s"] or 0.0, berth["ttft_p50_s"] or 0.0),
        "runs": runs,
    }
    path = write_results(args.results, figures)
    print(f"\n{'policy':<12}{'calls':>6}{'done':>6}{'attain':>8}{'@pool':>7}{'TTFT p50':>10}{'p90':>8}{'TPOT p50':>10}")
    for policy, r in runs.items():
        print(
            f"{policy:<12}{r['calls']:>6}{r['completed']:>6}{r['attainment']:>8.2f}{r['attainment_at_pool']:>7.2f}"
            f"{r['ttft_p50_s'] or 0:>10.2f}{r['ttft_p90_s'] or 0:>8.2f}{r['tpot_p50_s'] or 0:>10.4f}"
        )
    print(
        f"attainment berth / k8s-spread: {figures['attainment_berth_over_spread']} (end to end), "
        f"{figures['attainment_at_pool_berth_over_spread']} (at the pool); figures in {path}"
    )
    return figures


if __name__ == "__main__":
    main()
