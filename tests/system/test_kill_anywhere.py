"""Kill it anywhere: the orchestrator worker, the tool worker and the nodes SIGKILLed at random moments under a
workload that uses every feature a task has (tests/system/mixed_workload.py), on one `berth up` with three nodes.

After the kills, every task ends as it must (completed; cancelled for the two cancel tasks), no tool call whose
result was recorded ran again, every task's ledger holds what the engines served, no lease is left, and every
history of the test replays on the code under test.

The moments are drawn from a seeded random.Random: BERTH_CHAOS_SEED sets the seed (else one is drawn and
printed; every failure names it). BERTH_CHAOS_KILLS is how many times the worker is killed (10 by default, a few
minutes on two cores; `make chaos` kills it 50 times beside two CPU hogs), BERTH_CHAOS_TOOL_KILLS and
BERTH_CHAOS_NODE_KILLS the tool worker and nodes (3 each). The kills and their pauses are the seed's; the
moments they land on are the machine's, so a seed replays the same plan, not the same interleaving.
"""

from __future__ import annotations

import asyncio
import os
import random
import sqlite3
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from sdk import SyncClient, TaskStatus
from tests.replay_check import assert_histories_replay, started_since
from tests.system.books import assert_no_step_finished_twice, check_nothing_hidden
from tests.system.conftest import Stack, fleet_stack, wait_until
from tests.system.killer import Killer, NodeAgent, OrchestratorWorker, ToolWorker
from tests.system.mixed_workload import JOBS, Workload, register_own_loop_agent

pytestmark = pytest.mark.system

SEED = int(os.environ.get("BERTH_CHAOS_SEED") or random.SystemRandom().randrange(2**32))
WORKER_KILLS = int(os.environ.get("BERTH_CHAOS_KILLS") or 10)
TOOL_WORKER_KILLS = int(os.environ.get("BERTH_CHAOS_TOOL_KILLS") or 3)
NODE_KILLS = int(os.environ.get("BERTH_CHAOS_NODE_KILLS") or 3)

FLEET = [
    {"node_id": "kill-a", "datacenter": "east", "zone": "east-1a", "capacity": "on-demand", "gpus": "1xH100-80GB"},
    {"node_id": "kill-b", "datacenter": "east", "zone": "east-1b", "capacity": "spot", "gpus": "1xA100-40GB"},
    {"node_id": "kill-c", "datacenter": "west", "zone": "west-1a", "capacity": "on-demand", "gpus": "2xL4-24GB"},
]
AGENTS = "orchestrator.demo.sample_agents:ALL,tests.system.kill_anywhere_agents:CHAOS"
TOOL_QUEUES = ("agent/research", "agent/writer", "agent/chaos-asker", "agent/chaos-dweller")
# Seconds between the victim being back and the next kill, drawn uniformly: from at once (a worker still
# replaying what the last kill left) to well into a task's next steps.
GAP_S = (0.0, 12.0)
# Once the kills are done, every task still has this long to end (bounded: a task that does not end fails).
SETTLE_S = 600.0
EVERY_FEATURE = [f for f in JOBS if f != "dwell"]


def _timeout(kills: int, per_kill_s: float) -> pytest.MarkDecorator:
    """pytest-timeout for a test of `kills` kills: generous, since the suite must pass on a busy machine."""
    return pytest.mark.timeout(900 + kills * per_kill_s)


@pytest.fixture(scope="module")
def kill_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    # A killed node is marked lost (its replicas and leases dropped) 6 s after its last heartbeat.
    with fleet_stack(
        tmp_path_factory.mktemp("kill-anywhere"),
        FLEET,
        env={"BERTH_NODE_LOST_AFTER_S": "6"},
        agents=AGENTS,
        up_module="tests.system.chaos_up",
        latency_scale=1.0,
        load_time_scale=0.05,
    ) as stack:
        register_own_loop_agent(stack)
        yield stack


@dataclass
class Outcome:
    """What a chaos run did, for the checks and the summary line."""

    workload: Workload
    killer: Killer
    began: datetime


def _run(stack: Stack, prefix: str, features: list[str], killer_of: type, kills: int, **victim: object) -> Outcome:
    """Submit rounds of the workload until the killer has made its kills, then let every task end."""
    print(f"\nBERTH_CHAOS_SEED={SEED}: {kills} kill(s) of the {killer_of.__name__}", flush=True)
    began = datetime.now(UTC) - timedelta(seconds=1)
    rng = random.Random(f"{SEED}/{prefix}")
    workload = Workload(stack, prefix, features, stack.env["BERTH_TOOL_JOURNAL"])
    killer = Killer(killer_of(stack=stack, **victim), kills, rng, lambda: [t.status for t in workload.running()], GAP_S)
    try:
        workload.submit_round()
        killer.start()
        while killer.is_alive():
            # Every kill lands on running tasks: a round that ended before the kills did is followed by another.
            if workload.all_final():
                workload.submit_round()
            killer.join(timeout=1)
        assert killer.error is None, f"seed {SEED}: the killer stopped: {killer.error}"
        wait_until(workload.all_final, SETTLE_S, f"every task of {prefix} to end (seed {SEED})")
    finally:
        killer.stop.set()
        workload.stop()
    assert workload.errors == [], f"seed {SEED}: " + "\n".join(workload.errors)
    assert len(killer.kills) == kills, f"seed {SEED}: {len(killer.kills)} of {kills} kills"
    return Outcome(workload, killer, began)


# ----- the checks ---------------------------------------------------------------------------------


def _ended_as_expected(stack: Stack, outcome: Outcome) -> dict[str, dict]:
    """Every task (and every sub-agent) in its final status, as its job says; their states by id."""
    states = {t.task_id: stack.http.get(f"/v1/tasks/{t.task_id}").json() for t in outcome.workload.snapshot()}
    for state in list(states.values()):
        for child in state.get("children") or []:
            states.setdefault(child, stack.http.get(f"/v1/tasks/{child}").json())
    expected = {t.task_id: t.ends for t in outcome.workload.snapshot()}
    wrong = {
        task_id: (state["status"], state.get("error"))
        for task_id, state in states.items()
        if state["status"] != expected.get(task_id, TaskStatus.completed)
    }
    assert wrong == {}, f"seed {SEED}: tasks that did not end as they should: {wrong}"
    over = {i: s["spend"] for i, s in states.items() if s["spend"]["tokens_used"] > s["spend"]["token_limit"]}
    assert over == {}, f"seed {SEED}: tasks over budget: {over}"
    return states


def _journal(stack: Stack, prefix: str) -> dict[str, list[tuple[str, int]]]:
    """Each tool call of the test (by idempotency key) → its runs, in order: (process, attempt)."""
    runs: dict[str, list[tuple[str, int]]] = defaultdict(list)
    with open(stack.env["BERTH_TOOL_JOURNAL"], encoding="utf-8") as journal:
        for line in journal:
            key, _tool, pid, attempt = line.split()
            if key.startswith(f"default:{prefix}"):
                runs[key].append((pid.removeprefix("pid="), int(attempt.removeprefix("attempt="))))
    return runs


def _tool_calls_run_again(stack: Stack, prefix: str, killed_tool_workers: set[int]) -> tuple[list, list]:
    """(tool calls run again without excuse, tool calls run again because their worker was killed mid-call).

    The allowance is exact. Temporal runs a scheduled activity again only as its next attempt, and only once the
    attempt before it failed or timed out, that is, once no result of it was recorded; these tools never fail,
    so an attempt ends without a result only when the tool worker running it was killed. A call run again is
    excused when its runs have strictly increasing attempts and every run but the last was in a process the test
    SIGKILLed. A call whose result was recorded and that ran again anyway (scheduled anew: attempt 1 again) or a
    call run again by a process nobody killed is a fault.
    """
    faults, excused = [], []
    for key, runs in _journal(stack, prefix).items():
        if len(runs) == 1:
            continue
        attempts = [attempt for _, attempt in runs]
        earlier = {pid for pid, _ in runs[:-1]}
        if attempts == sorted(set(attempts)) and earlier <= {str(pid) for pid in killed_tool_workers}:
            excused.append((key, runs))
        else:
            faults.append((key, runs))
    return faults, excused


def _books_hold(stack: Stack, states: dict[str, dict]) -> None:
    """Each task's ledger against the engines' own journals. A task whose generations were never cut (no
    interruption, not cancelled) must have booked exactly what they served; one that was cut may miss only the
    last chunk of a cut reply nobody read (books.check_nothing_hidden). No step is finished twice, and no
    placement of a step calls the model twice: the books alone cannot see a step run and booked twice."""
    tasks = SyncClient(stack.api, stack.admin_key())
    for task_id, state in states.items():
        assert_no_step_finished_twice(list(tasks.task(task_id).events()))
        ledger = stack.http.get(f"/v1/tasks/{task_id}/ledger").json()["totals"]
        engine = stack.engine_usage(task_id)
        if not engine:
            assert ledger["calls"] == 0, (SEED, task_id, ledger)
            continue
        if state["interruptions"] == 0 and state["status"] != TaskStatus.cancelled:
            served = (engine["requests"], engine["prompt_tokens"], engine["completion_tokens"])
            booked = (ledger["calls"], ledger["prompt_tokens"], ledger["completion_tokens"])
            assert booked == served, f"seed {SEED}: {task_id} booked {booked}, the engines served {served}"
        else:
            check_nothing_hidden(ledger, engine)


def _leases_left(stack: Stack) -> list:
    with sqlite3.connect(f"file:{stack.data_dir / 'berth.db'}?mode=ro", uri=True, timeout=5) as db:
        rows = db.execute("SELECT task_id, step, node_id FROM leases").fetchall()
    busy = [(r["replica_id"], r["active_leases"]) for r in stack.http.get("/v1/replicas").json() if r["active_leases"]]
    return rows + busy


def _leases_on(stack: Stack) -> list[str]:
    try:
        with sqlite3.connect(f"file:{stack.data_dir / 'berth.db'}?mode=ro", uri=True, timeout=5) as db:
            return [row[0] for row in db.execute("SELECT node_id FROM leases")]
    except sqlite3.Error:
        return []


async def _replay_and_count_runs(stack: Stack, began: datetime, label: str, task_id: str) -> tuple[int, int]:
    """Replay every run the test started (a failure names the test); (runs replayed, runs of `task_id`)."""
    client = await Client.connect(
        f"127.0.0.1:{stack.env['BERTH_TEMPORAL_PORT']}", data_converter=pydantic_data_converter
    )
    replayed = await assert_histories_replay(client, started_since(began), label)
    runs = [e async for e in client.list_workflows(f'WorkflowId = "{task_id}"')]
    return replayed, len(runs)


# A node SIGKILLed after its engine finished a short reply but before any heartbeat of the generation reported
# progress leaves that reply out of the books (0 tokens lost booked for a reply the engine served: seed 790216159,
# 92 tokens). It is a known gap (docs/limits.md, "Cut generations"); the node test reports it as an expected
# failure, after every other check has run, instead of hiding it or failing the suite on a timing.
NODE_KILL_BOOKS_GAP = "known gap: a reply a killed node's engine finished between two heartbeats is not booked"


def _check_everything(
    stack: Stack,
    outcome: Outcome,
    prefix: str,
    label: str,
    killed_tool_workers: set[int],
    books_gap_known: bool = False,
) -> dict:
    states = _ended_as_expected(stack, outcome)
    faults, excused = _tool_calls_run_again(stack, prefix, killed_tool_workers)
    assert faults == [], f"seed {SEED}: recorded tool calls that ran again: {faults}"
    books_gap = None
    try:
        _books_hold(stack, states)
    except AssertionError as gap:
        if not books_gap_known:
            raise
        books_gap = gap
    wait_until(lambda: not _leases_left(stack), 60, f"no lease left (seed {SEED}): {_leases_left(stack)}")
    first_long = f"default:{prefix}1-long"
    replayed, long_runs = asyncio.run(_replay_and_count_runs(stack, outcome.began, label, first_long))
    if books_gap is not None:
        pytest.xfail(f"{NODE_KILL_BOOKS_GAP} (seed {SEED}): {books_gap}")
    ledgers = {i: stack.http.get(f"/v1/tasks/{i}/ledger").json()["totals"] for i in states}
    summary = {
        "seed": SEED,
        "minutes": round((datetime.now(UTC) - outcome.began).total_seconds() / 60, 1),
        "kills": len(outcome.killer.kills),
        "rounds": outcome.workload.rounds,
        "tasks": len(states),
        "ended": dict(Counter(s["status"] for s in states.values())),
        "tool calls": len(_journal(stack, prefix)),
        "tool calls run again (recorded)": len(faults),
        "tool calls run again (in flight on a killed worker)": len(excused),
        "interruptions": sum(s["interruptions"] for s in states.values()),
        "cancelled mid-generation with tokens lost": sum(
            1 for i, totals in ledgers.items() if i.endswith("-cancel-generation") and totals["lost_tokens"] > 0
        ),
        "histories replayed": replayed,
        "runs of the first long task": long_runs,
        "statuses at the kills": dict(sum((k.running for k in outcome.killer.kills), Counter())),
    }
    print(f"\n{label}: {summary}", flush=True)
    return {"states": states, "long_runs": long_runs, "excused": excused}


# ----- the tests ------------------------------------------------------------------------------------


@_timeout(WORKER_KILLS, 120)
def test_the_orchestrator_worker_killed_at_random_moments_loses_nothing(
    kill_stack: Stack, request: pytest.FixtureRequest
) -> None:
    outcome = _run(kill_stack, "kw", EVERY_FEATURE, OrchestratorWorker, WORKER_KILLS)
    checked = _check_everything(kill_stack, outcome, "kw", request.node.nodeid, killed_tool_workers=set())
    # Each feature was exercised, not merely submitted: the driver's actions were taken, the long task continued
    # as new, the preempted writer handed its text over with notice.
    tracked = {t.task_id: t for t in outcome.workload.snapshot()}
    for round_ in range(1, outcome.workload.rounds + 1):
        acted = {f: tracked[f"default:kw{round_}-{f}"].acted for f in ("ask", "budget", "preempt")}
        assert all(acted.values()), f"seed {SEED}: round {round_}: actions not taken: {acted}"
        for feature in ("cancel-generation", "cancel-tool"):
            assert tracked[f"default:kw{round_}-{feature}"].acted.get("cancel"), (SEED, round_, feature)
        spawned = checked["states"][f"default:kw{round_}-spawn"]["children"]
        assert len(spawned) == 2, (SEED, round_, spawned)
    assert checked["long_runs"] >= 2, f"seed {SEED}: the long task never continued as new"
    preempted = checked["states"]["default:kw1-preempt"]
    cuts = kill_stack.http.get("/v1/tasks/default:kw1-preempt/interruptions").json()
    assert preempted["interruptions"] >= 1 and any(c["data"]["kind"] == "notice" for c in cuts), (SEED, cuts)
    assert kill_stack.log_tail().count("worker exited with code -9") >= 1


@_timeout(TOOL_WORKER_KILLS, 180)
def test_the_tool_worker_killed_at_random_moments_runs_again_only_calls_in_flight(
    kill_stack: Stack, request: pytest.FixtureRequest
) -> None:
    outcome = _run(
        kill_stack, "kt", ["tools", "spawn", "ask", "dwell"], ToolWorker, TOOL_WORKER_KILLS, queues=TOOL_QUEUES
    )
    _check_everything(kill_stack, outcome, "kt", request.node.nodeid, outcome.killer.killed_pids)


@_timeout(NODE_KILLS, 180)
def test_a_node_killed_at_random_moments_loses_nothing(kill_stack: Stack, request: pytest.FixtureRequest) -> None:
    outcome = _run(
        kill_stack,
        "kn",
        ["tools", "spawn", "long", "own-loop"],
        NodeAgent,
        NODE_KILLS,
        nodes=tuple(n["node_id"] for n in FLEET),
        leases_on=lambda: _leases_on(kill_stack),
    )
    checked = _check_everything(
        kill_stack, outcome, "kn", request.node.nodeid, killed_tool_workers=set(), books_gap_known=True
    )
    # Each kill landed while a step held a lease: a generation was taken away and placed again, or the replica
    # the step was waiting for was loading there (a load cut off is retried elsewhere, not an interruption).
    lost = [i for i, s in checked["states"].items() if s["interruptions"]]
    loading = sum(k.running.get("waiting_for_gpu", 0) for k in outcome.killer.kills)
    assert lost or loading, f"seed {SEED}: no kill of a node took a generation or a load away"
