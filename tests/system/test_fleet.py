"""The fleet as real processes: `berth up` with three `berth node` agents on simulated GPUs.

Each node runs its replicas as real simulated-engine processes that take real time to load
(scaled by the load-time factor: a 7B model from origin ~8 s here, from disk ~4 s), so the
differences these tests check are measured, not configured: where steps ran, that an idle
replica goes away and leaves its weights on disk, and that prewarmed weights load faster.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

from sdk import Budget, ModelEntry, ScalingPolicy, SyncClient, TaskStatus
from tests.conftest import ROOT
from tests.system.conftest import Stack, fleet_stack, wait_until

FLEET = [
    {"node_id": "east-a", "datacenter": "east", "zone": "east-1a", "capacity": "on-demand", "gpus": "1xH100-80GB"},
    {"node_id": "east-b", "datacenter": "east", "zone": "east-1b", "capacity": "spot", "gpus": "1xA100-40GB"},
    {"node_id": "west-a", "datacenter": "west", "zone": "west-1a", "capacity": "on-demand", "gpus": "2xL4-24GB"},
]
SUBJECTS = "H100 memory bandwidth; decode speed for an 8b model"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with fleet_stack(tmp_path_factory.mktemp("fleet"), FLEET, latency_scale=0.1, load_time_scale=0.15) as stack:
        yield stack


def _run(stack: Stack, task_id: str, model: str, subjects: str = SUBJECTS) -> list[dict]:
    """Run a research task on `model` to completion; its llm_call events (where each step ran)."""
    client = SyncClient(stack.api, stack.admin_key())
    handle = client.submit("research", subjects, budget=Budget(30_000), task_id=task_id, model=model)
    handle.result(timeout=120)
    assert handle.status().status == TaskStatus.completed
    return [e.data for e in handle.events() if e.kind == "llm_call"]


def test_steps_go_where_the_weights_are_and_stay_on_the_warm_replica(fleet: Stack) -> None:
    small = _run(fleet, "fleet-small-1", "llama-3.2-1b")
    large = _run(fleet, "fleet-large-1", "llama-3.1-8b")
    for steps in (small, large):
        first, rest = steps[0], steps[1:]
        assert first["tier"] == "origin" and first["load_s"] > 0, first
        assert rest and all(s["tier"] == "warm" and s["replica_id"] == first["replica_id"] for s in rest), steps
        assert all(s["node_id"] == first["node_id"] for s in steps)  # (how long each waited is the benchmarks')
    # The cold start said so while it lasted: a loading event, the task waiting for its GPU, then the load's seconds.
    events = list(SyncClient(fleet.api, fleet.admin_key()).task("default:fleet-small-1").events())
    kinds = [e.kind for e in events]
    loading = events[kinds.index("replica_loading")]
    assert loading.data["tier"] == "origin" and loading.data["node_id"] == small[0]["node_id"]
    waits = [e.data["waiting_for"] for e in events if e.kind == "state" and e.data["status"] == "waiting_for_gpu"]
    # (It may have waited for a node to join first: the fleet's first task.)
    assert any(w.startswith("a cold start: llama-3.2-1b loading on ") for w in waits), waits
    loaded = events[kinds.index("replica_loaded")]
    assert loaded.data["seconds"] > 0 and kinds.index("replica_loaded") < kinds.index("llm_call")
    # The next task of a model goes to the replica already serving it: no new load.
    again = _run(fleet, "fleet-small-2", "llama-3.2-1b")
    assert {s["replica_id"] for s in again} == {small[0]["replica_id"]} and {s["tier"] for s in again} == {"warm"}
    replicas = fleet.http.get("/v1/replicas").json()
    assert {(r["model"], r["replica_id"]) for r in replicas} >= {
        ("llama-3.2-1b", small[0]["replica_id"]),
        ("llama-3.1-8b", large[0]["replica_id"]),
    }


def test_an_idle_replica_scales_to_zero_and_keeps_its_weights_on_disk(fleet: Stack) -> None:
    client = SyncClient(fleet.api, fleet.admin_key())
    # 15 GiB of weights: loading them from disk saves ~27 s of origin fetch, more than the price
    # or fragmentation difference between these nodes, so the disk copy wins the next placement.
    model = "llama-3.1-8b"
    steps = _run(fleet, "fleet-idle-1", model)
    node_id = steps[0]["node_id"]
    client.set_policy(model, ScalingPolicy(min_replicas=0, idle_timeout_s=2))
    wait_until(
        lambda: not fleet.http.get("/v1/replicas", params={"model": model}).json(),
        45,
        f"the idle {model} replica to be unloaded",
    )
    assert model in {w.model for w in client.node(node_id).cached_weights}
    back = _run(fleet, "fleet-idle-2", model)
    assert (back[0]["tier"], back[0]["node_id"]) == ("disk", node_id), back[0]


def test_a_prewarmed_model_loads_from_disk_where_a_cold_one_comes_from_origin(fleet: Stack) -> None:
    client = SyncClient(fleet.api, fleet.admin_key())
    # Two models of the same size that no node has seen: one prewarmed onto the east nodes' disks (where an
    # interactive step wants to run: the on-demand H100 writes ~8x faster than the west node's L4s).
    for name in ("prewarmed-7b", "cold-7b"):
        client.put_model(
            ModelEntry(
                name=name, weights_gib=14.2, kv_headroom_gib=8.0, usd_per_1m_prompt=0.2, usd_per_1m_completion=0.3
            )
        )
    # The CLI's --wait follows the copies until both east nodes report them, then exits 0.
    prewarm = subprocess.run(
        [
            sys.executable,
            "-m",
            "orchestrator.cli.main",
            "models",
            "prewarm",
            "prewarmed-7b",
            "--datacenter",
            "east",
            "--wait",
            "--timeout",
            "120",
        ],
        env=fleet.env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert prewarm.returncode == 0, prewarm.stderr
    rows = [line.split() for line in prewarm.stdout.splitlines() if line.split()[:1] in (["east-a"], ["east-b"])]
    assert sorted((row[0], row[1]) for row in rows) == [("east-a", "origin"), ("east-b", "origin")], prewarm.stdout
    assert "prewarmed-7b: weights on 2 node(s)" in prewarm.stderr
    assert all("prewarmed-7b" in {w.model for w in client.node(n).cached_weights} for n in ("east-a", "east-b"))
    prewarmed = _run(fleet, "fleet-prewarmed", "prewarmed-7b")[0]
    cold = _run(fleet, "fleet-cold", "cold-7b")[0]
    assert (prewarmed["tier"], prewarmed["node_id"]) == ("disk", "east-a"), prewarmed
    assert cold["tier"] == "origin", cold
    # How much sooner the disk copy serves is the weights_tiers benchmark's to measure: on a busy machine the
    # seconds of two loads say more about the other processes than about the tiers.
