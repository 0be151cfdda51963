"""Acquire/release throughput of the pool with several control-plane replicas on PostgreSQL, against one on
SQLite, in one run; and no GPU booked twice under that load (issue 9).

The fleet: 16 simulated nodes × 8 H100s, registered in the store. Each acquirer is a process holding its own
PoolService (a control-plane replica's pool, with its own pool id) that acquires a lease for a new step of
one of three models and releases it, as fast as it can, for DURATION_S. A reporter thread plays the nodes:
every 0.5 s it heartbeats each node with the replicas the pools reserved on it, as warm (a real node reports
them once loaded), so most leases land on warm replicas (the fast path) and some start replicas (the
reservation path). Configurations, each on a fresh database:

- SQLite, 1 acquirer: the embedded default (one control plane);
- PostgreSQL, 1 acquirer, and PostgreSQL, 8 acquirers (8 control-plane replicas).

The check: at the end, and at every reporter beat, no GPU holds more replica memory than it has — counted
from the reservations every pool made and from what the nodes report — and every lease left is on a replica
some pool reserved. The run fails (exit 1) if the check does.

    python -m benchmarks.pool_concurrency [--duration 8]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import random
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

from ._results import write_results

NODES = 16
GPUS_PER_NODE = 8
GPU_MIB = 81559
MODELS = ("llama-3.1-8b", "qwen2.5-7b", "llama-3.2-1b")
SECRET = "bench-node-secret"
REPORT_EVERY_S = 0.5


def _setup_fleet(url: str) -> None:
    from orchestrator.store import Store
    from sdk.wire.fleet import NodeSpec

    store = Store.open(url)
    for n in range(NODES):
        store.fleet.register(
            NodeSpec.model_validate(
                {
                    "node_id": f"n{n:02d}",
                    "datacenter": "east" if n % 2 else "west",
                    "zone": f"z{n % 4}",
                    "capacity": "on-demand",
                    "usd_per_hour": 20.0,
                    "gpus": [
                        {"index": i, "type_name": "H100-80GB", "memory_total_mib": GPU_MIB}
                        for i in range(GPUS_PER_NODE)
                    ],
                    "weights_cache_capacity_bytes": 2000 * 2**30,
                }
            ),
            SECRET,
        )
    store.close()


def _acquirer(url: str, pool_id: str, duration_s: float, start_at: float, out: multiprocessing.Queue) -> None:
    """One control-plane replica's pool, in its own process, acquiring and releasing until time is up."""
    from orchestrator.catalogue import ModelCatalogue
    from orchestrator.config import BerthConfig
    from orchestrator.pool.service import PoolService
    from orchestrator.store import Store
    from sdk.wire.lease import LeaseRequest, ReleaseLease

    store = Store.open(url)
    pool = PoolService(store, ModelCatalogue(BerthConfig(), store.models), pool_id=pool_id)
    rng = random.Random(pool_id)
    counts = {"placed": 0, "wait": 0, "other": 0}
    latencies: list[float] = []
    while time.time() < start_at:
        time.sleep(0.005)
    end = time.monotonic() + duration_s
    n = 0
    while time.monotonic() < end:
        n += 1
        began = time.perf_counter()
        grant = pool.acquire(LeaseRequest(task_id=f"{pool_id}-{n}", step=1, model=rng.choice(MODELS), tokens=600))
        if grant.outcome == "placed":
            pool.release(ReleaseLease(lease_id=grant.lease_id, replica_warm=True))
        latencies.append(time.perf_counter() - began)
        counts[grant.outcome if grant.outcome in counts else "other"] += 1
    store.close()
    out.put({"pool": pool_id, **counts, "latencies": latencies})


class _Reporter(threading.Thread):
    """The nodes: heartbeats listing the replicas reserved on them as warm; checks the GPUs at every beat."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        from orchestrator.store import Store

        self.store = Store.open(url)
        self.stop = threading.Event()
        self.violations: list[str] = []
        self.beats = 0

    def run(self) -> None:
        from sdk.wire.fleet import NodeHeartbeat

        while not self.stop.wait(REPORT_EVERY_S):
            by_node: dict[str, list[dict]] = defaultdict(list)
            for r in self.store.reservations.list():
                by_node[r.node_id].append(
                    {"replica_id": r.replica_id, "model": r.model, "gpu_indexes": list(r.gpu_indexes), "state": "warm"}
                )
            for n in range(NODES):
                node = f"n{n:02d}"
                self.store.fleet.heartbeat(
                    NodeHeartbeat.model_validate(
                        {"node_id": node, "replicas": by_node.get(node, []), "cached_weights": []}
                    ),
                    SECRET,
                )
            self.violations += check_gpus(self.store)
            self.beats += 1


def check_gpus(store) -> list[str]:  # noqa: ANN001
    """Every GPU's replica memory within its size, by the pools' reservations and by the nodes' reports."""
    models = {m.entry.name: m.entry.weights_gib + m.entry.kv_headroom_gib for m in store.models.list()}
    gib = GPU_MIB / 1024
    problems = []
    reserved: dict[tuple[str, int], float] = defaultdict(float)
    for r in store.reservations.list():
        for i in r.gpu_indexes:
            reserved[(r.node_id, i)] += r.per_device_gib
    reported: dict[tuple[str, int], float] = defaultdict(float)
    for replica in store.fleet.replicas():
        for i in replica.gpu_indexes:
            reported[(replica.node_id, i)] += models[replica.model] / len(replica.gpu_indexes)
    for name, used in (("reserved", reserved), ("reported", reported)):
        problems += [
            f"{node} GPU {i}: {gb:.1f} GiB {name} of {gib:.1f}" for (node, i), gb in used.items() if gb > gib + 1e-6
        ]
    reservations = {r.replica_id for r in store.reservations.list()}
    problems += [
        f"lease {lease.lease_id} on unreserved replica {lease.replica_id}"
        for lease in store.leases.list()
        if lease.replica_id not in reservations
    ]
    return problems


def run_configuration(url: str, acquirers: int, duration_s: float) -> dict:
    _setup_fleet(url)
    reporter = _Reporter(url)
    reporter.start()
    ctx = multiprocessing.get_context("spawn")
    out: multiprocessing.Queue = ctx.Queue()
    start_at = time.time() + 4.0  # every process imported and connected before the clock starts
    procs = [ctx.Process(target=_acquirer, args=(url, f"cp-{i}", duration_s, start_at, out)) for i in range(acquirers)]
    for p in procs:
        p.start()
    results = [out.get(timeout=120 + duration_s) for _ in procs]
    for p in procs:
        p.join(timeout=30)
    reporter.stop.set()
    reporter.join(timeout=10)
    violations = reporter.violations + check_gpus(reporter.store)
    reporter.store.close()
    ops = sum(r["placed"] + r["wait"] + r["other"] for r in results)
    latencies = sorted(x for r in results for x in r["latencies"])
    return {
        "acquirers": acquirers,
        "duration_s": duration_s,
        "operations": ops,
        "placed": sum(r["placed"] for r in results),
        "waited": sum(r["wait"] for r in results),
        "ops_per_s": round(ops / duration_s, 1),
        "p50_ms": round(latencies[len(latencies) // 2] * 1000, 2) if latencies else None,
        "p99_ms": round(latencies[int(len(latencies) * 0.99)] * 1000, 2) if latencies else None,
        "reporter_beats": reporter.beats,
        "violations": violations[:20],
        "violation_count": len(violations),
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--duration", type=float, default=8.0)
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tests.postgres import local_postgres

    figures: dict = {"nodes": NODES, "gpus_per_node": GPUS_PER_NODE, "models": list(MODELS)}
    with tempfile.TemporaryDirectory() as tmp:
        figures["sqlite_1"] = run_configuration(f"sqlite:///{tmp}/bench.db", 1, args.duration)
    with local_postgres() as server:
        figures["postgresql_1"] = run_configuration(server.new_database("bench_one"), 1, args.duration)
        figures["postgresql_8"] = run_configuration(server.new_database("bench_eight"), 8, args.duration)
    base = figures["sqlite_1"]["ops_per_s"]
    figures["ratio_postgresql_8_over_sqlite_1"] = (
        round(figures["postgresql_8"]["ops_per_s"] / base, 2) if base else None
    )
    figures["ratio_postgresql_1_over_sqlite_1"] = (
        round(figures["postgresql_1"]["ops_per_s"] / base, 2) if base else None
    )
    figures["no_double_booking"] = all(
        figures[k]["violation_count"] == 0 for k in ("sqlite_1", "postgresql_1", "postgresql_8")
    )
    for key in ("sqlite_1", "postgresql_1", "postgresql_8"):
        f = figures[key]
        print(
            f"{key:14} {f['ops_per_s']:8.1f} acquire+release/s  p50 {f['p50_ms']} ms  p99 {f['p99_ms']} ms  "
            f"placed {f['placed']}  waited {f['waited']}  violations {f['violation_count']}"
        )
    print(
        f"PostgreSQL × 8 / SQLite × 1: {figures['ratio_postgresql_8_over_sqlite_1']}×; "
        f"no double booking: {figures['no_double_booking']}"
    )
    print(f"wrote {write_results('pool_concurrency', figures)}")
    if not figures["no_double_booking"]:
        print(json.dumps({k: figures[k]["violations"] for k in ("sqlite_1", "postgresql_1", "postgresql_8")}, indent=1))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
