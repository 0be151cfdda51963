"""Two real `berth node` processes beside an in-process control plane, for the preemption benchmarks.

The nodes run simulated GPUs (1×H100 each, replicas at zero load time, the engine at real simulated
latency so a generation streams for a while) and join through the API on a loopback port; the
orchestrator worker with the pool, a tool worker and a Temporal dev server run in this process.
The scaler keeps one warm replica of the benchmark's model on each node, so a task taken off one
node resumes on a warm replica of the other.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from sqlmodel import Session, col, select
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from orchestrator.api import TemporalGateway
from orchestrator.catalogue import ModelCatalogue
from orchestrator.config import BerthConfig
from orchestrator.pool.autoscaler import Autoscaler
from orchestrator.pool.service import PoolService
from orchestrator.server import create_app
from orchestrator.store import Store
from orchestrator.store.tables import LedgerRow
from orchestrator.worker import build_worker
from sdk import Agent, ScalingPolicy, tool_worker
from sdk.wire.identity import Role

from .fleet_step import ApiThread

NODES = ("bench-a", "bench-b")
JOIN_TOKEN = "bench-join-token"
WARM_WAIT_S = 120.0


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
                [
                    sys.executable,
                    "-m",
                    "orchestrator.cli.main",
                    "node",
                    "--node-id",
                    self.node_id,
                    "--simulate",
                    "1xH100-80GB",
                    "--datacenter",
                    "east",
                    "--zone",
                    "east-1a",
                    "--load-time-scale",
                    "0",
                    "--heartbeat-s",
                    "1",
                    "--cache-dir",
                    str(self.cache_dir),
                ],
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def replica_pids(self) -> list[int]:
        out = subprocess.run(["pgrep", "-f", str(self.cache_dir / "replica-logs")], capture_output=True, text=True)
        return [int(p) for p in out.stdout.split() if int(p) != os.getpid()]

    def kill(self) -> tuple[float, int]:
        """SIGKILL the agent and its replicas; the wall time of the kill and how many replicas died."""
        assert self.proc is not None
        replicas = self.replica_pids()
        at_wall = time.time()
        for pid in [self.proc.pid, *replicas]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.proc.wait(10)
        return at_wall, len(replicas)

    def stop(self) -> None:
        if self.alive:
            assert self.proc is not None
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        for pid in self.replica_pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@dataclass
class TwoNodes:
    client: Client
    store: Store
    autoscaler: Autoscaler
    nodes: dict[str, NodeProcess]
    api_url: str
    model: str
    queue: str
    operator_key: str  # for the fleet actions a benchmark takes through the API (a preemption notice)

    async def two_warm(self, stale: frozenset[str] = frozenset()) -> float:
        """Tick the scaler every second until each node has a warm replica; seconds it took.

        `stale`: replica ids of a killed node, still listed until its restarted agent's first heartbeat.
        Placement may well put the second replica beside the first (one GPU has room for both), so while a
        node lacks one the others are drained (nothing new is placed there; what they run goes on).
        """
        store, nodes = self.store, self.nodes
        t0 = time.monotonic()
        try:
            while time.monotonic() - t0 < WARM_WAIT_S:
                alive = {n for n, p in nodes.items() if p.alive}
                replicas = [r for r in store.fleet.replicas(self.model) if r.replica_id not in stale]
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
                await self.autoscaler.tick()
                await asyncio.sleep(1.0)
        finally:
            for node_id in nodes:
                with contextlib.suppress(Exception):  # a node not yet registered
                    store.fleet.undrain(node_id)
        raise TimeoutError(
            f"no warm replica of {self.model} on each of {sorted(nodes)} after {WARM_WAIT_S:.0f} s: "
            f"{[(r.node_id, r.replica_id, r.state) for r in store.fleet.replicas(self.model)]}"
        )

    def replicas_on(self, node_id: str) -> frozenset[str]:
        return frozenset(r.replica_id for r in self.store.fleet.replicas(self.model) if r.node_id == node_id)


@contextlib.asynccontextmanager
async def two_nodes(tmp: Path, agent: Agent, queue: str) -> AsyncIterator[TwoNodes]:
    """The control plane, both nodes joined and a warm replica of the agent's model on each."""
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=str(Path(sys.executable).parent / "temporal"), data_converter=pydantic_data_converter
    )
    nodes: dict[str, NodeProcess] = {}
    try:
        address = env.client.service_client.config.target_host
        config = BerthConfig(
            data_dir=tmp, join_token=JOIN_TOKEN, database_url=f"sqlite:///{tmp / 'berth.db'}", temporal_address=address
        )
        store = Store.open(config.resolved_database_url)
        store.agents.register(agent.spec())
        api_store = Store.open(config.resolved_database_url)
        pool = PoolService(
            store, ModelCatalogue(config, store.models), sync_every_s=1.0, node_lost_after_s=config.node_lost_after_s
        )
        model = agent.spec().model
        assert store.models.set_policy(model, ScalingPolicy(min_replicas=2)) is not None, model
        autoscaler = Autoscaler(pool, env.client, task_queue=queue)
        with ApiThread(create_app(config, api_store, TemporalGateway(address, config.temporal_namespace))) as api:
            node_env = {
                **os.environ,
                "BERTH_API_URL": api.url,
                "BERTH_TEMPORAL_ADDRESS": address,
                "BERTH_ENGINE_LATENCY_SCALE": "1.0",
                "BERTH_DATA_DIR": str(tmp / "node-data"),
            }
            # Each joins admitted with a token of its own (with the cluster token it would wait for approval).
            tokens = {n: store.node_admission.mint(n, 600).join_token for n in NODES}
            nodes = {n: NodeProcess(n, tmp, {**node_env, "BERTH_JOIN_TOKEN": tokens[n]}) for n in NODES}
            for node in nodes.values():
                node.start()
            async with contextlib.AsyncExitStack() as stack:
                await stack.enter_async_context(build_worker(env.client, store, config, task_queue=queue, pool=pool))
                await stack.enter_async_context(tool_worker(env.client, agent))
                while len(store.fleet.list(status="healthy")) < len(nodes):  # both joined: the scaler spreads
                    await asyncio.sleep(0.5)
                operator_key = store.keys.create(Role.operator, name="benchmark").key
                fleet = TwoNodes(env.client, store, autoscaler, nodes, api.url, model, queue, operator_key)
                await fleet.two_warm()
                yield fleet
    finally:
        for node in nodes.values():
            node.stop()
        await env.shutdown()


def ledger_rows(store: Store, task_id: str) -> list[LedgerRow]:
    """The task's ledger rows with their write time, which `SqlTokenLedger.entries` does not return."""
    with Session(store.engine) as session:
        return list(
            session.exec(select(LedgerRow).where(LedgerRow.task_id == task_id).order_by(col(LedgerRow.id))).all()
        )


def wall(at: datetime) -> float:
    return (at if at.tzinfo else at.replace(tzinfo=UTC)).timestamp()


def node_of(served_by: str) -> str:
    return served_by.split("/", 1)[0]


async def first_token_after(store: Store, task_id: str, node_id: str, after_wall: float, wait_s: float) -> float:
    """When the task's first generation settled after `after_wall` on another node had its first token."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        rows = [
            r
            for r in ledger_rows(store, task_id)
            if r.kind == "settled" and node_of(r.served_by) != node_id and wall(r.created_at) > after_wall
        ]
        if rows:
            return wall(rows[0].created_at) - rows[0].duration_s + rows[0].ttft_s
        await asyncio.sleep(0.05)
    raise TimeoutError(f"{task_id} did not resume within {wait_s:.0f} s")
