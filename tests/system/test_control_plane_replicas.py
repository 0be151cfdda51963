"""Two control-plane replicas on one PostgreSQL and one Temporal, one of them killed under running tasks.

Each replica is a `berth server` and a `berth worker` (its own pool) with its own BERTH_CONTROL_PLANE_ID;
both share the database and Temporal, as several pods of one deployment would. Tasks are submitted
through replica A while two simulated GPU nodes report to replica B; then A's server and worker get
SIGKILL mid-run. Every task must complete through B, no GPU may ever carry more reserved memory than
it holds (sampled from `gpu_reservations` the whole time), no lease may be left behind, and B must take
over the scaler's leadership once A's term (5 ticks of 2 s) has run out.

The processes are started here, not by `berth up` (one control plane) nor the package's shared `stack`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from orchestrator.engines.replicas.processes import stop_orphans
from orchestrator.pool.autoscaler import SCALER_JOB
from orchestrator.stack.admin_key import ensure_admin_key
from orchestrator.stack.supervisor import terminate
from orchestrator.stack.up import temporal_binary
from orchestrator.store import Store
from orchestrator.store.reservations import EPSILON_GIB
from sdk import Budget, SyncClient, TaskStatus
from tests.conftest import ROOT, free_port
from tests.postgres import postgres_server, postgres_url  # noqa: F401  (fixtures: a fresh database)
from tests.replay_check import assert_namespace_replays
from tests.system.conftest import AGENTS, wait_until

pytestmark = pytest.mark.system

NODES = [("cp-node-a", "east", "east-1a"), ("cp-node-b", "east", "east-1b")]
GPUS = "2xH100-80GB"
# Two models, so that both pools start replicas of their own and their reservations meet on the GPUs.
TASKS = [
    ("llama-3.1-8b", "H100 memory bandwidth; kv cache size for 8b; spot preemption"),
    ("qwen2.5-7b", "A100 memory bandwidth; decode speed for an 8b model; L4 memory bandwidth"),
    ("llama-3.1-8b", "L4 memory bandwidth; H100 memory bandwidth; decode speed for an 8b model"),
    ("qwen2.5-7b", "spot preemption; kv cache size for 8b; A100 memory bandwidth"),
    ("llama-3.1-8b", "decode speed for an 8b model; spot preemption; H100 memory bandwidth"),
]
BUDGET = 60_000


@dataclass
class Processes:
    """The test's child processes, each in its own session with its log in `log_dir`."""

    log_dir: Path
    running: dict[str, subprocess.Popen] = field(default_factory=dict)

    def start(self, name: str, argv: list[str], env: dict[str, str]) -> subprocess.Popen:
        with open(self.log_dir / f"{name}.log", "ab") as log:
            process = subprocess.Popen(
                argv, env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.running[name] = process
        return process

    def kill(self, name: str) -> None:
        process = self.running[name]
        os.kill(process.pid, signal.SIGKILL)
        process.wait(10)

    def alive(self, name: str) -> bool:
        return self.running[name].poll() is None

    def stop_all(self) -> None:
        """SIGTERM in reverse start order, SIGKILL after the grace."""
        terminate(list(reversed(self.running.values())))

    def print_logs(self) -> None:
        for path in sorted(self.log_dir.glob("*.log")):
            print(f"===== {path.name} =====\n{path.read_text(errors='replace')[-4000:]}")


class ReservationWatch:
    """Samples `gpu_reservations` every 0.2 s: the reserved memory on each (node, GPU) against its size."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.samples = 0
        self.seen: set[str] = set()
        self.pools: dict[str, set[str]] = {"reserving": set(), "leasing": set()}  # which pools did the work
        self.overbooked: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> ReservationWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            self.check()

    def check(self) -> None:
        nodes = self.store.fleet.list()
        sizes = {
            (node.node_id, gpu.index): gpu.memory_total_mib / 1024
            for node in nodes
            for gpu in node.gpus
            if gpu.memory_total_mib
        }
        listed = {replica.replica_id for node in nodes for replica in node.replicas}
        used: dict[tuple[str, int], float] = {}
        for r in self.store.reservations.list():
            self.seen.add(r.replica_id)
            self.pools["reserving"].add(r.pool_id)
            if r.reported_at is not None and r.replica_id not in listed:
                continue  # its node listed it and no longer does: a record of a stopped replica, holding nothing
            for index in r.gpu_indexes:
                used[(r.node_id, index)] = used.get((r.node_id, index), 0.0) + r.per_device_gib
        for gpu, gib in used.items():
            if gib > sizes.get(gpu, 0.0) + EPSILON_GIB:
                self.overbooked.append(f"{gpu}: {gib:.1f} GiB reserved of {sizes.get(gpu, 0.0):.1f}")
        self.pools["leasing"].update(lease.pool_id for lease in self.store.leases.list())
        self.samples += 1


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    procs = Processes(tmp_path)
    try:
        yield procs
    finally:
        procs.stop_all()
        for node_id, _, _ in NODES:  # a node agent killed at the end of its grace leaves its replicas behind
            stop_orphans(tmp_path / "node-data" / "node" / node_id / "replica-logs")


def _berth(*args: str) -> list[str]:
    return [sys.executable, "-m", "orchestrator.cli.main", *args]


def _ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/readyz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def test_a_killed_control_plane_replica_leaves_its_tasks_to_the_other(
    tmp_path: Path,
    postgres_url: str,  # noqa: F811  (the fixture imported above)
    processes: Processes,
) -> None:
    started = time.monotonic()
    store = Store.open(postgres_url)
    admin_key, _ = ensure_admin_key(store, tmp_path / "admin-key")
    temporal_port = free_port()
    common = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "BERTH_DATABASE_URL": postgres_url,
        "BERTH_TEMPORAL_ADDRESS": f"127.0.0.1:{temporal_port}",
        "BERTH_JOIN_TOKEN": "replicas-test-token",
        "BERTH_ENGINE_LATENCY_SCALE": "0.5",
        "BERTH_LOAD_TIME_SCALE": "0.02",
        "BERTH_TOOL_JOURNAL": str(tmp_path / "journal.txt"),
    }
    urls: dict[str, str] = {}
    envs: dict[str, dict[str, str]] = {}
    for plane in ("a", "b"):
        port = free_port()
        urls[plane] = f"http://127.0.0.1:{port}"
        envs[plane] = {
            **common,
            "BERTH_CONTROL_PLANE_ID": f"cp-{plane}",
            "BERTH_API_PORT": str(port),
            "BERTH_API_URL": urls[plane],
            "BERTH_DATA_DIR": str(tmp_path / f"cp-{plane}"),
        }
    try:
        processes.start(
            "temporal",
            [
                temporal_binary(),
                "server",
                "start-dev",
                "--ip",
                "127.0.0.1",
                "--port",
                str(temporal_port),
                "--ui-port",
                str(free_port()),
                "--db-filename",
                str(tmp_path / "temporal.db"),
                "--namespace",
                "default",
                "--log-level",
                "warn",
            ],
            common,
        )
        # A's worker starts first, so that its scaler leads and B's has something to take over.
        processes.start("server-a", _berth("server"), envs["a"])
        processes.start("worker-a", _berth("worker"), envs["a"])
        wait_until(lambda: store.leadership.leader(SCALER_JOB) == "cp-a", 60, "A's scaler to lead")
        processes.start("server-b", _berth("server"), envs["b"])
        processes.start("worker-b", _berth("worker"), envs["b"])
        wait_until(lambda: _ready(urls["a"]) and _ready(urls["b"]), 180, "both APIs ready")
        node_env = {**envs["b"], "BERTH_DATA_DIR": str(tmp_path / "node-data")}
        for node_id, datacenter, zone in NODES:
            token = store.node_admission.mint(node_id, 600).join_token  # admitted: no approval to wait for
            processes.start(
                node_id,
                _berth(
                    "node",
                    "--node-id",
                    node_id,
                    "--simulate",
                    GPUS,
                    "--datacenter",
                    datacenter,
                    "--zone",
                    zone,
                    "--api",
                    urls["b"],
                    "--load-time-scale",
                    "0.02",
                    "--heartbeat-s",
                    "2",
                ),
                {**node_env, "BERTH_JOIN_TOKEN": token},
            )
        processes.start("tools", _berth("worker", "--agents", AGENTS), {**envs["b"], "BERTH_API_KEY": admin_key})

        with SyncClient(urls["a"], admin_key) as via_a, SyncClient(urls["b"], admin_key) as via_b:
            wait_until(lambda: len(via_b.nodes(status="healthy")) == len(NODES), 180, "both nodes healthy")
            wait_until(lambda: "research" in {a.name for a in via_a.agents()}, 180, "the research agent")
            with ReservationWatch(store) as watch:
                ids = [
                    via_a.submit(
                        "research", subjects, budget=Budget(BUDGET), model=model, task_id=f"cp-replicas-{i}"
                    ).task_id
                    for i, (model, subjects) in enumerate(TASKS)
                ]
                # Mid-run: a step finished on some task, none finished yet.
                wait_until(lambda: any(via_b.task(t).status().step >= 2 for t in ids), 60, "a task at step 2")
                assert not any(via_b.task(t).status().status == TaskStatus.completed for t in ids)
                assert processes.alive("server-a") and processes.alive("worker-a")
                processes.kill("server-a")
                processes.kill("worker-a")
                killed_at = time.monotonic()

                # Leadership: A's term runs out 10 s after its last renewal at most, then B's next tick takes it.
                wait_until(lambda: store.leadership.leader(SCALER_JOB) == "cp-b", 20, "B's scaler to take over")
                for task_id in ids:  # generous: on a busy machine a step's replica load alone can take 20 s
                    via_b.task(task_id).result(timeout=max(30.0, 240 - (time.monotonic() - started)))
                    state = via_b.task(task_id).status()
                    assert state.status == TaskStatus.completed, (task_id, state.error)
                print(
                    f"all tasks done {time.monotonic() - killed_at:.1f}s after A was killed; pools seen: {watch.pools}"
                )
            watch.check()
            assert watch.samples > 10 and watch.seen, "no reservation was ever sampled"
            assert not watch.overbooked, watch.overbooked[:5]
            # Each step releases its lease before it checkpoints: none may outlive the tasks, A's included.
            wait_until(lambda: not store.leases.list(), 10, "no lease left")
        assert store.leadership.leader(SCALER_JOB) == "cp-b"
        # Both replicas' workers wrote these histories, one of them killed mid-task: each must replay.
        assert assert_namespace_replays(f"127.0.0.1:{temporal_port}", "two control-plane replicas") >= len(TASKS)
    except BaseException:
        processes.print_logs()
        raise
    finally:
        store.close()
