"""Work lost per preemption: tokens generated twice and wall time lost when a node goes mid-answer.

Two real `berth node` processes with a warm replica of "llama-3.1-8b" each (benchmarks/_two_nodes.py,
the engine at real simulated speed: 120 tokens/s). Each trial runs a task of three tool steps and
a long answer (about 1,500 tokens, ~12 s of generation) and takes the answer's node away
ANSWER_CUT_S into the answer, in one of three ways:

- notice: `POST /v1/nodes/{id}/preempt` (what `berth nodes preempt --notice 10s` sends);
- sigterm: SIGTERM to the node agent (a drain, or the spot warning handled by the machine);
- kill: SIGKILL to the node agent, without notice. Its replica is killed a moment later (the
  machine is gone), after the engine has written down how many tokens it had streamed to the
  dead agent: the truth that Berth's own books (the last heartbeat) cannot see.

Tokens regenerated, by Berth: what the cut generation had written and the step did not continue
(the engine's count, minus the ledger's `kept`). Against two baselines computed from the same
trial: (a) restarting the whole task, as a Kubernetes Job would (every prompt and completion
token of the task before the cut, and the wall time since it started), and (b) restarting only
the interrupted step (every token the cut generation had written, and the time it took).
Goals (issue 4): with notice 0 tokens regenerated; without notice no more than one heartbeat
interval of tokens (the step beats every 0.5 s while tokens stream: 60 tokens at 120 tokens/s).

    python -m benchmarks.work_lost [--trials notice=3,sigterm=3,kill=3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import httpx  # noqa: E402

from activities.step.heartbeats import HEARTBEAT_EVERY_S  # noqa: E402
from sdk import Agent, Budget, TaskSpec, TaskState, TaskStatus  # noqa: E402
from sdk.wire.task_run import CURRENT_WORKFLOW_VERSION, TaskRun

from ._results import write_results  # noqa: E402
from ._tasks import observe, topics  # noqa: E402
from ._two_nodes import TwoNodes, first_token_after, ledger_rows, node_of, two_nodes, wall  # noqa: E402

MODEL = "llama-3.1-8b"
TOKENS_PER_S = 120.0  # the simulated llama-3.1-8b (orchestrator/engines/simulated/models.py)
QUEUE = "bench-work-lost"
TOOL_STEPS = 3
ANSWER_TOKENS = 1500
ANSWER_CUT_S = 4.0
TRIALS = {"notice": 3, "sigterm": 3, "kill": 3}
WAIT_S = 120.0


AGENT = Agent(
    "bench-longform-agent",
    MODEL,
    "Observe each topic, then write a long answer.",
    [observe],
    max_steps=TOOL_STEPS + 5,
    max_tokens_per_step=4096,
)


async def _start(fleet: TwoNodes) -> tuple[str, float]:
    task_id = f"bench-lost-{os.urandom(5).hex()}"
    spec = TaskSpec(
        task_id=task_id,
        agent=AGENT.name,
        input=f"{topics(TOOL_STEPS)}\nlength: {ANSWER_TOKENS} tokens",
        budget=Budget(1_000_000),
    )
    run = TaskRun(
        task_id=task_id,
        spec=spec,
        agent=fleet.store.agents.get(AGENT.name),
        submitted_at=datetime.now(UTC),
        workflow_version=CURRENT_WORKFLOW_VERSION,
    )
    started = time.time()
    await fleet.client.start_workflow("AgentTaskWorkflow", run, id=task_id, task_queue=QUEUE)
    return task_id, started


async def _answer_running(fleet: TwoNodes, task_id: str) -> tuple[str, float]:
    """(node, wall time) once the last tool step has settled: the answer's generation starts then."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        settled = [r for r in ledger_rows(fleet.store, task_id) if r.kind == "settled"]
        if len(settled) >= TOOL_STEPS:
            return node_of(settled[-1].served_by), wall(settled[-1].created_at)
        await asyncio.sleep(0.02)
    raise TimeoutError(f"{task_id} did not reach its answer")


def _streamed_before_cut(fleet: TwoNodes, node_id: str, task_id: str) -> int | None:
    """Tokens the node's replicas streamed for the task's cut generation, from their usage journals."""
    journals = (fleet.nodes[node_id].cache_dir / "replica-logs").glob("*.usage.jsonl")
    entries = [json.loads(line) for path in journals for line in path.read_text().splitlines() if line.strip()]
    aborted = [e for e in entries if e.get("task") == task_id and e.get("kind") == "aborted"]
    return sum(int(a["completion"]) for a in aborted) if aborted else None


async def _cut(fleet: TwoNodes, how: str, node_id: str) -> float:
    node = fleet.nodes[node_id]
    at = time.time()
    if how == "notice":
        httpx.post(
            f"{fleet.api_url}/v1/nodes/{node_id}/preempt",
            json={"notice_s": 10},
            timeout=10,
            headers={"authorization": f"Bearer {fleet.operator_key}"},
        ).raise_for_status()
    elif how == "sigterm":
        assert node.proc is not None
        node.proc.send_signal(signal.SIGTERM)
    else:
        assert node.proc is not None
        node.proc.send_signal(signal.SIGKILL)  # the agent only: its replica writes down what it had streamed
        node.proc.wait(10)
        await asyncio.sleep(0.5)
        node.kill()  # and then the machine is gone
    return at


async def _trial(fleet: TwoNodes, how: str) -> dict:
    task_id, started = await _start(fleet)
    node_id, answer_started = await _answer_running(fleet, task_id)
    await asyncio.sleep(max(0.0, answer_started + ANSWER_CUT_S - time.time()))
    stale = fleet.replicas_on(node_id)
    cut_at = await _cut(fleet, how, node_id)
    first_token = await first_token_after(fleet.store, task_id, node_id, cut_at, WAIT_S)
    state: TaskState = await fleet.client.get_workflow_handle(task_id, result_type=TaskState).result()
    if state.status != TaskStatus.completed:
        raise RuntimeError(f"{task_id} ended {state.status}: {state.error}")
    node = fleet.nodes[node_id]
    if node.alive:
        node.proc.wait(30)  # type: ignore[union-attr]  # a preempted or stopped node leaves by itself
    node.start()  # the machine comes back (or is replaced) and rejoins
    streamed = _streamed_before_cut(fleet, node_id, task_id)
    rows = ledger_rows(fleet.store, task_id)
    kept = sum(r.completion_tokens for r in rows if r.kind == "kept")
    lost = sum(r.completion_tokens for r in rows if r.kind == "lost")
    before = [r for r in rows if r.kind == "settled" and wall(r.created_at) <= cut_at]
    cut_generation = streamed if streamed is not None else kept + lost
    interruptions = [e.data for e in fleet.store.events.read(task_id, limit=1000) if e.kind == "interruption"]
    resume_s = first_token - cut_at
    result = {
        "how": how,
        "task_id": task_id,
        "node": node_id,
        "cut_after_answer_s": round(cut_at - answer_started, 3),
        "engine_streamed_before_cut": streamed,
        "ledger_kept": kept,
        "ledger_lost": lost,
        "berth_regenerated_tokens": max(0, cut_generation - kept),
        "berth_wall_lost_s": round(resume_s, 3),
        "step_restart_regenerated_tokens": cut_generation,
        "step_restart_wall_lost_s": round(resume_s + cut_generation / TOKENS_PER_S, 3),
        "job_restart_regenerated_tokens": sum(r.prompt_tokens + r.completion_tokens for r in before) + cut_generation,
        "job_restart_wall_lost_s": round(cut_at - started + resume_s, 3),
        "interruption": {k: interruptions[0].get(k) for k in ("kind", "tokens_kept", "tokens_lost", "resume_s")}
        if interruptions
        else None,
        "answer": state.result,
    }
    await fleet.two_warm(stale)
    print(
        f"{how}: cut {result['cut_after_answer_s']:.1f} s into the answer on {node_id}; engine streamed {streamed},"
        f" kept {kept}, lost {lost} → regenerated {result['berth_regenerated_tokens']} (step restart "
        f"{cut_generation}, Job restart {result['job_restart_regenerated_tokens']}); first token elsewhere after"
        f" {resume_s:.2f} s; interruption {result['interruption']}",
        flush=True,
    )
    return result


async def main(plan: dict[str, int]) -> dict:
    trials: list[dict] = []
    async with two_nodes(Path(tempfile.mkdtemp(prefix="berth-bench-lost-")), AGENT, QUEUE) as fleet:
        reference = await _uncut_answer(fleet)
        for how, count in plan.items():
            for _ in range(count):
                trials.append(await _trial(fleet, how))
    for t in trials:
        t["answer_matches_uncut"] = t.pop("answer") == reference
    by_how = {how: [t for t in trials if t["how"] == how] for how in plan}
    heartbeat_tokens = round(TOKENS_PER_S * HEARTBEAT_EVERY_S)

    def total(how: str, key: str) -> float:
        return round(sum(t[key] for t in by_how[how]), 3)

    figures = {
        "model": MODEL,
        "tokens_per_s": TOKENS_PER_S,
        "answer_tokens": ANSWER_TOKENS,
        "cut_after_answer_s": ANSWER_CUT_S,
        "trials": {how: len(ts) for how, ts in by_how.items()},
        "heartbeat_every_s": HEARTBEAT_EVERY_S,
        "goal": {"notice_regenerated_tokens": 0, "kill_regenerated_tokens_max": heartbeat_tokens},
        "summary": {
            how: {
                "berth_regenerated_tokens": [t["berth_regenerated_tokens"] for t in ts],
                "step_restart_regenerated_tokens": total(how, "step_restart_regenerated_tokens"),
                "job_restart_regenerated_tokens": total(how, "job_restart_regenerated_tokens"),
                "berth_wall_lost_s_p50": round(statistics.median(t["berth_wall_lost_s"] for t in ts), 3),
                "step_restart_wall_lost_s_p50": round(statistics.median(t["step_restart_wall_lost_s"] for t in ts), 3),
                "job_restart_wall_lost_s_p50": round(statistics.median(t["job_restart_wall_lost_s"] for t in ts), 3),
                "berth_over_step_restart_tokens": round(
                    total(how, "berth_regenerated_tokens") / max(1.0, total(how, "step_restart_regenerated_tokens")), 4
                ),
                "berth_over_job_restart_tokens": round(
                    total(how, "berth_regenerated_tokens") / max(1.0, total(how, "job_restart_regenerated_tokens")), 4
                ),
            }
            for how, ts in by_how.items()
        },
        "within_goal": {
            how: sum(1 for t in ts if t["berth_regenerated_tokens"] <= (heartbeat_tokens if how == "kill" else 0))
            for how, ts in by_how.items()
        },
        "kill_regenerated_within_1s": sum(
            1 for t in by_how.get("kill", []) if t["berth_regenerated_tokens"] <= round(TOKENS_PER_S)
        ),
        "received_but_not_kept": {how: [t["ledger_lost"] for t in ts] for how, ts in by_how.items()},
        "note": "regenerated = what the engine streamed before the cut minus what the step continued from; with "
        "notice, tokens streamed but not received (in the socket, or written in the moment before the "
        "engine noticed the client had gone) count as regenerated too; received_but_not_kept is Berth's "
        "own share (the ledger's lost tokens)",
        "answers_match_uncut": all(t["answer_matches_uncut"] for t in trials),
        "per_trial": trials,
    }
    path = write_results("work_lost", figures)
    for how, s in figures["summary"].items():
        print(
            f"{how}: regenerated {s['berth_regenerated_tokens']} tokens (step restart "
            f"{s['step_restart_regenerated_tokens']}, Job restart {s['job_restart_regenerated_tokens']}: ratios "
            f"{s['berth_over_step_restart_tokens']} / {s['berth_over_job_restart_tokens']}); wall lost p50 "
            f"{s['berth_wall_lost_s_p50']} s (step restart {s['step_restart_wall_lost_s_p50']} s, Job restart "
            f"{s['job_restart_wall_lost_s_p50']} s)"
        )
    print(
        f"trials within the goal (0 regenerated with notice, ≤ {heartbeat_tokens} without): "
        f"{figures['within_goal']} of {figures['trials']}; kills within 1 s of tokens: "
        f"{figures['kill_regenerated_within_1s']}; received but not kept: {figures['received_but_not_kept']};"
        f" every answer the same as an uncut one: {figures['answers_match_uncut']}"
    )
    print(f"figures written to {path}")
    return figures


async def _uncut_answer(fleet: TwoNodes) -> str:
    """The answer an uninterrupted run writes (replies are deterministic)."""
    task_id, _ = await _start(fleet)
    state: TaskState = await fleet.client.get_workflow_handle(task_id, result_type=TaskState).result()
    assert state.status == TaskStatus.completed and state.result, state.error
    return state.result


def _plan(text: str) -> dict[str, int]:
    plan = {how: int(count) for how, count in (item.split("=") for item in text.split(","))}
    if unknown := set(plan) - set(TRIALS):
        raise SystemExit(f"--trials: unknown kind(s) {sorted(unknown)}; use {', '.join(TRIALS)}")
    return plan


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=_plan, default=TRIALS, help="kind=count,... (notice, sigterm, kill)")
    asyncio.run(main(parser.parse_args().trials))
