"""Chaos: node agents killed or stopped under running tasks, on `berth up` with three real nodes.

Each test runs a long multi-step task, takes away the node serving it mid-run, and checks that
the task completes on another node from its last checkpoint: no tool call runs twice, every
token an engine generated is in the ledger (a reply nobody received is booked as lost, never
hidden), used ≤ budget, and no lease is left behind. A killed node's replicas are killed with
it (its machine is gone); `berth up` then restarts the agent, which rejoins with no replicas.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest

from sdk import Budget, SyncClient, TaskStatus
from tests.conftest import ROOT
from tests.system.books import assert_no_step_finished_twice, assert_nothing_hidden_nothing_twice
from tests.system.conftest import Stack, fleet_stack, wait_until

FLEET = [
    {"node_id": "chaos-a", "datacenter": "east", "zone": "east-1a", "capacity": "on-demand", "gpus": "1xH100-80GB"},
    {"node_id": "chaos-b", "datacenter": "east", "zone": "east-1b", "capacity": "spot", "gpus": "1xA100-40GB"},
    {"node_id": "chaos-c", "datacenter": "west", "zone": "west-1a", "capacity": "on-demand", "gpus": "2xL4-24GB"},
]
SUBJECTS = "; ".join(
    [
        "H100 memory bandwidth",
        "A100 memory bandwidth",
        "L4 memory bandwidth",
        "spot preemption",
        "kv cache size for 8b",
        "decode speed for an 8b model",
    ]
)
BUDGET = 60_000
REPORT_CUT_AFTER_S = 2.0


@pytest.fixture(scope="module")
def chaos_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    # A killed node is marked lost (its replicas and leases dropped) 6 s after its last heartbeat.
    with fleet_stack(
        tmp_path_factory.mktemp("chaos"),
        FLEET,
        env={"BERTH_NODE_LOST_AFTER_S": "6"},
        latency_scale=1.0,
        load_time_scale=0.05,
    ) as stack:
        yield stack


def _serving(stack: Stack, task_id: str) -> tuple[str, str, int]:
    """(node, replica, step) of the task's latest model call (the ledger names node/replica)."""
    entries = stack.http.get(f"/v1/tasks/{task_id}/ledger").json()["entries"]
    last = [e for e in entries if e["kind"] == "settled"][-1]
    node, replica = last["served_by"].split("/")
    return node, replica, last["step"]


def _kill_node(stack: Stack, node_id: str, sig: int) -> None:
    """Signal a node agent; with SIGKILL its replicas die too (the machine is gone)."""
    os.kill(stack.child_pid(node_id), sig)
    if sig == signal.SIGKILL:
        found = subprocess.run(["pgrep", "-f", f"node/{node_id}/replica-logs"], capture_output=True, text=True)
        for pid in found.stdout.split():
            os.kill(int(pid), signal.SIGKILL)


def _run_and_take_away_its_node(stack: Stack, task_id: str, sig: int) -> tuple[tuple[str, str, int], list[dict]]:
    client = SyncClient(stack.api, stack.admin_key())
    handle = client.submit("research", SUBJECTS, budget=Budget(BUDGET), task_id=task_id, model="llama-3.1-8b")
    stack.wait_for_step(task_id, 3, timeout_s=120)
    serving = _serving(stack, task_id)
    _kill_node(stack, serving[0], sig)
    handle.result(timeout=240)
    state = handle.status()
    assert state.status == TaskStatus.completed, state.error
    assert state.spend.tokens_used <= BUDGET
    events = list(handle.events())
    assert_no_step_finished_twice(events)
    calls = [e.data for e in events if e.kind == "llm_call"]
    interruptions = [e.data for e in events if e.kind == "interruption"]
    # Each interruption is on record: where it happened, what it cost, where the step resumed.
    assert state.interruptions == len(interruptions)
    assert [e.data for e in handle.interruptions()] == interruptions  # GET /v1/tasks/{id}/interruptions
    if interruptions:
        shown = subprocess.run(
            [sys.executable, "-m", "orchestrator.cli.main", "tasks", "show", task_id],
            env=stack.env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert f"on {serving[0]}" in shown.stdout and "tokens lost; resumed on" in shown.stdout, shown.stdout
    for record in interruptions:
        assert record["node_id"] == serving[0] and record["kind"] in ("lost", "notice", "replica_gone"), record
        assert record["resumed_on"] and record["resume_s"] >= 0 and record["tokens_lost"] >= 0, record
    return serving, calls


def _no_leases_left(stack: Stack) -> bool:
    replicas = stack.http.get("/v1/replicas").json()
    return all(r["active_leases"] == 0 for r in replicas)


def _leases_held(stack: Stack, task_id: str) -> int:
    """Leases the pool still holds for a task, in the store (a restarted pool counts them as load)."""
    with sqlite3.connect(f"file:{stack.data_dir / 'berth.db'}?mode=ro", uri=True) as db:
        return db.execute("SELECT count(*) FROM leases WHERE task_id = ?", (task_id,)).fetchone()[0]


def _ready(stack: Stack) -> bool:
    try:
        return stack.http.get("/readyz", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def _restarted(stack: Stack, name: str, pid: int) -> bool:
    try:
        return stack.child_pid(name) != pid
    except (OSError, ValueError):
        return False


def test_a_node_killed_under_a_task_is_left_behind_and_the_task_completes_elsewhere(chaos_stack: Stack) -> None:
    (node, replica, step), calls = _run_and_take_away_its_node(chaos_stack, "default:chaos-kill-9", signal.SIGKILL)
    # The killed replica served nothing once the task had moved on (a step or two may have finished there
    # between reading the ledger and the kill); the agent `berth up` restarts serves with new replicas.
    moved = next(i for i, c in enumerate(calls) if c["step"] > step and c["replica_id"] != replica)
    assert all(c["replica_id"] != replica for c in calls[moved:]), (node, replica, calls[moved:])
    assert_nothing_hidden_nothing_twice(chaos_stack, "default:chaos-kill-9")
    wait_until(lambda: _no_leases_left(chaos_stack), 30, "no lease left on any replica")


def test_a_node_stopped_with_sigterm_hands_its_task_over(chaos_stack: Stack) -> None:
    _run_and_take_away_its_node(chaos_stack, "default:chaos-sigterm", signal.SIGTERM)
    assert_nothing_hidden_nothing_twice(chaos_stack, "default:chaos-sigterm")
    wait_until(lambda: _no_leases_left(chaos_stack), 30, "no lease left on any replica")


def test_a_node_preempted_mid_answer_hands_its_text_over_and_the_answer_goes_on_from_it(chaos_stack: Stack) -> None:
    client = SyncClient(chaos_stack.api, chaos_stack.admin_key())
    handle = client.submit(
        "writer",
        f"{SUBJECTS}\nlength: 1500 tokens",
        budget=Budget(BUDGET),
        task_id="default:chaos-preempt",
        model="llama-3.1-8b",
    )
    chaos_stack.wait_for_step("default:chaos-preempt", 6, timeout_s=120)  # its searches are done: it writes the report
    node = wait_until(lambda: _generating_on(chaos_stack), 30, "the report's generation to hold a lease")
    # The cut point: 2 s into a ~12 s report, so it has text to hand over (a notice that lands before its
    # first token keeps nothing, rightly, and proves nothing here).
    time.sleep(REPORT_CUT_AFTER_S)
    assert client.preempt_node(node, notice_s=10).status == "draining"
    handle.result(timeout=240)
    state = handle.status()
    assert state.status == TaskStatus.completed and state.spend.tokens_used <= BUDGET
    assert state.result is not None and state.result.startswith("Report on 6 subjects.")
    assert state.result.count("Conclusion:") == 1  # one answer, not a restarted one glued to the first
    [cut] = [e.data for e in handle.interruptions()]
    # With notice the generation stopped at once and handed its text over: nothing it had sent was lost.
    assert (cut["kind"], cut["node_id"], cut["tokens_lost"]) == ("notice", node, 0), cut
    assert cut["tokens_kept"] > 0 and cut["resumed_on"] != node, cut
    ledger = chaos_stack.http.get("/v1/tasks/default:chaos-preempt/ledger").json()["totals"]
    assert (ledger["kept_tokens"], ledger["lost_tokens"]) == (cut["tokens_kept"], 0)
    assert_no_step_finished_twice(list(handle.events()))
    assert_nothing_hidden_nothing_twice(chaos_stack, "default:chaos-preempt")
    wait_until(
        lambda: client.node(node).status == "healthy", 60, "the preempted node to come back (berth up restarts it)"
    )


def _generating_on(stack: Stack) -> str | None:
    """The node of the one replica with a lease held (the only task running is generating there)."""
    busy = [r["node_id"] for r in stack.http.get("/v1/replicas").json() if r["active_leases"]]
    return busy[0] if len(busy) == 1 else None


def test_the_control_plane_server_killed_mid_task_is_restarted_and_the_task_completes(chaos_stack: Stack) -> None:
    client = SyncClient(chaos_stack.api, chaos_stack.admin_key())
    handle = client.submit(
        "research", SUBJECTS, budget=Budget(BUDGET), task_id="default:chaos-server", model="llama-3.1-8b"
    )
    chaos_stack.wait_for_step("default:chaos-server", 3, timeout_s=120)
    os.kill(chaos_stack.child_pid("server"), signal.SIGKILL)  # nodes cannot book steps until it is back
    handle.result(timeout=240)
    state = handle.status()
    assert state.status == TaskStatus.completed and state.spend.tokens_used <= BUDGET
    assert_no_step_finished_twice(list(handle.events()))
    assert_nothing_hidden_nothing_twice(chaos_stack, "default:chaos-server")
    assert "server exited with code -9" in chaos_stack.log_tail()


def test_a_control_plane_server_frozen_longer_than_a_nodes_silence_allowance_loses_no_node(chaos_stack: Stack) -> None:
    """Nodes fall silent because the server that hears them is gone, not they: none is marked lost (which
    would take the lease from under a reply already on its way, and leave its tokens unbooked)."""
    client = SyncClient(chaos_stack.api, chaos_stack.admin_key())
    handle = client.submit(
        "research", SUBJECTS, budget=Budget(BUDGET), task_id="default:chaos-frozen", model="llama-3.1-8b"
    )
    chaos_stack.wait_for_step("default:chaos-frozen", 3, timeout_s=120)
    worker_log = chaos_stack.data_dir / "logs" / "worker.log"
    lost_before = worker_log.read_text().count(" is lost: ")
    server = chaos_stack.child_pid("server")
    os.kill(server, signal.SIGSTOP)
    try:
        time.sleep(9)  # the stack marks a node lost after 6 s of silence
    finally:
        os.kill(server, signal.SIGCONT)
    handle.result(timeout=240)
    state = handle.status()
    assert state.status == TaskStatus.completed and state.spend.tokens_used <= BUDGET and state.interruptions == 0
    assert_no_step_finished_twice(list(handle.events()))
    assert_nothing_hidden_nothing_twice(chaos_stack, "default:chaos-frozen")
    assert worker_log.read_text().count(" is lost: ") == lost_before


def test_an_author_can_simulate_a_preemption_and_see_tools_stay_idempotent(chaos_stack: Stack) -> None:
    client = SyncClient(chaos_stack.api, chaos_stack.admin_key())
    handle = client.submit(
        "research", SUBJECTS, budget=Budget(BUDGET), task_id="default:chaos-simulated", model="llama-3.1-8b"
    )
    chaos_stack.wait_for_step("default:chaos-simulated", 3, timeout_s=120)
    handle.simulate_preemption()
    handle.result(timeout=240)
    state = handle.status()
    assert state.status == TaskStatus.completed and state.interruptions == 1
    [cut] = handle.interruptions()
    assert cut.data["kind"] == "simulated" and cut.data["resumed_on"] != cut.data["node_id"], cut.data
    assert_no_step_finished_twice(list(handle.events()))
    assert_nothing_hidden_nothing_twice(chaos_stack, "default:chaos-simulated")


def test_the_orchestrator_worker_killed_mid_step_is_restarted_and_the_task_completes(chaos_stack: Stack) -> None:
    # The worker runs the workflows and holds the pool. Killed while the task holds a lease, the
    # restarted pool finds the lease in the store and counts it again; the step resumes from history.
    client = SyncClient(chaos_stack.api, chaos_stack.admin_key())
    handle = client.submit(
        "research", SUBJECTS, budget=Budget(BUDGET), task_id="default:chaos-worker", model="llama-3.1-8b"
    )
    chaos_stack.wait_for_step("default:chaos-worker", 3, timeout_s=120)
    wait_until(lambda: _leases_held(chaos_stack, "default:chaos-worker") > 0, 30, "a step of the task to hold a lease")
    pid = chaos_stack.child_pid("worker")
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: _restarted(chaos_stack, "worker", pid), 30, "berth up to restart the worker")
    handle.result(timeout=240)
    state = handle.status()
    assert state.status == TaskStatus.completed, state.error
    assert state.spend.tokens_used <= BUDGET
    assert_no_step_finished_twice(list(handle.events()))
    assert_nothing_hidden_nothing_twice(chaos_stack, "default:chaos-worker")
    assert _leases_held(chaos_stack, "default:chaos-worker") == 0
    wait_until(lambda: _no_leases_left(chaos_stack), 30, "no lease left on any replica")
    assert "worker exited with code -9" in chaos_stack.log_tail()


def test_temporal_killed_mid_step_restarts_on_its_database_and_every_task_completes(chaos_stack: Stack) -> None:
    # SIGKILL, the harsher restart: the dev server gets no chance to flush or say goodbye. `berth up`
    # restarts it on the same --db-filename, and every process that talks to Temporal (API, worker,
    # node agents, tool worker) must find it again by itself.
    client = SyncClient(chaos_stack.api, chaos_stack.admin_key())
    before = ["default:chaos-temporal-a", "default:chaos-temporal-b"]
    handles = [
        client.submit("research", SUBJECTS, budget=Budget(BUDGET), task_id=task_id, model="llama-3.1-8b")
        for task_id in before
    ]
    chaos_stack.wait_for_step(before[0], 3, timeout_s=120)
    wait_until(lambda: _leases_held(chaos_stack, before[0]) > 0, 30, "a step of the task to hold a lease")
    pid = chaos_stack.child_pid("temporal")
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: _restarted(chaos_stack, "temporal", pid), 30, "berth up to restart Temporal")
    wait_until(lambda: _ready(chaos_stack), 30, "the API to reach Temporal again")
    # A task started through the API after the restart: the API's Temporal client reconnected too.
    handles.append(
        client.submit(
            "research", SUBJECTS, budget=Budget(BUDGET), task_id="default:chaos-temporal-after", model="llama-3.1-8b"
        )
    )
    for handle in handles:
        handle.result(timeout=240)
        state = handle.status()
        assert state.status == TaskStatus.completed, (handle.task_id, state.error)
        assert state.spend.tokens_used <= BUDGET
        assert_no_step_finished_twice(list(handle.events()))
        assert_nothing_hidden_nothing_twice(chaos_stack, handle.task_id)
        assert _leases_held(chaos_stack, handle.task_id) == 0
    wait_until(lambda: _no_leases_left(chaos_stack), 30, "no lease left on any replica")
    assert "temporal exited with code -9" in chaos_stack.log_tail()
