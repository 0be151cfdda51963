"""`berth node`: one GPU machine in the fleet — join, heartbeat, and run replicas on request.

The agent does three things side by side on one event loop:
- it tells the control plane what the node *is* once (`register`) and what it is *doing* every
  few seconds (`heartbeat`: GPU metrics, cached weights, replicas);
- it polls its own Temporal task queue `node/<node_id>`, where the pool sends it the loads
  and unloads of replicas (`orchestrator.node.activities`) and tasks send the model calls
  of the steps leased to its replicas (`orchestrator.node.generation`);
- on SIGTERM/SIGINT it stops taking work, stops its replicas and says so in a last heartbeat,
  so the pool stops routing to them at once instead of when the node is reaped as lost; when the
  control plane refuses its secret (the node was revoked) it stops the same way, without the
  heartbeats nobody would take, and ends with that refusal.

A node that joined with the cluster token is `pending` until an operator approves it: it heartbeats
(so its GPUs are seen) but is given no work, and its /readyz says it waits for approval.

On `--metrics-port`, beside /metrics: /healthz (the process answers) and /readyz (the node has joined
and its heartbeats get through: `readiness`).

The node secret the control plane hands out is kept in `<cache-dir>/node-secret`, so a
restarted agent rejoins as the same node rather than being refused as an impostor.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import httpx
from temporalio.client import Client
from temporalio.worker import Worker

from activities.llm_step import LlmStepActivities
from activities.step.heartbeats import HEARTBEAT_EVERY_S
from activities.step.writing_board import BOARD
from sdk.wire.fleet import (
    CachedModelWeights,
    Capacity,
    GpuDescription,
    GpuHealth,
    MigDeviceDescription,
    NodeHeartbeat,
    NodeRegistration,
    NodeStatus,
)
from sdk.wire.node_io import node_task_queue

from ..tokenizers import tokenizers_under
from .activities import NodeActivities
from .control_plane import ControlPlane, ControlPlaneError, CredentialRefused, NodeUnknown
from .discovery import GpuDiscovery, GpuInfo, SimulatedDiscovery
from .generation import NodeGeneration, ReplicaRouter, warm_up
from .metrics import serve_node_metrics
from .peer_server import CacheBlobs, PeerServer
from .peer_tickets import PeerTickets
from .replicas import ReplicaManager, busy_shares
from .step_books import RemoteStepBooks
from .transfers import TransferLog
from .writing_route import writing_route

log = logging.getLogger("berth.node")

SECRET_FILE = "node-secret"
# In-flight loads get this long to finish once the node is told to stop; then they are
# cancelled (their replicas stopped) and the pool retries them on another node.
GRACEFUL_SHUTDOWN_S = 10.0
# /readyz turns 503 when no heartbeat has got through for this many periods: one slow beat (up to the
# control-plane client's 10 s timeout) is not yet an outage, three missed ones are. A beat that fails
# outright turns it 503 at once.
READY_WITHIN_BEATS = 3


@dataclass
class NodeOptions:
    """Who and where the node is, and how it behaves; the CLI's flags land here."""

    node_id: str
    join_token: str
    cache_dir: Path
    datacenter: str = "local"
    zone: str = "local-1"
    capacity: Capacity = "on-demand"
    usd_per_hour: float = 0.0
    labels: dict[str, str] = field(default_factory=dict)
    disk_bandwidth_gbps: float = 2.0
    heartbeat_s: float = 5.0
    register_wait_s: float = 60.0
    replica_grace_s: float = 10.0
    metrics_port: int = 0  # the node's own /metrics, /healthz and /readyz; 0: none
    metrics_host: str = "127.0.0.1"  # where that port listens (`berth node --host`): loopback unless told
    engines: list[str] = field(default_factory=list)  # what it runs replicas with, as registered; empty: any
    peer_port: int | None = None  # serve this node's cached weights to its datacenter's nodes here; 0: any; None: no
    peer_limit_bytes_per_s: float | None = None  # what those copies may take of the node's network; None: all


def registration(options: NodeOptions, gpus: list[GpuInfo], cache_capacity_bytes: int) -> NodeRegistration:
    return NodeRegistration(
        node_id=options.node_id,
        join_token=options.join_token,
        datacenter=options.datacenter,
        zone=options.zone,
        capacity=options.capacity,
        usd_per_hour=options.usd_per_hour,
        labels=options.labels,
        disk_bandwidth_gbps=options.disk_bandwidth_gbps,
        weights_cache_capacity_bytes=cache_capacity_bytes,
        engines=options.engines,  # validated as engine kinds by NodeRegistration
        gpus=[
            GpuDescription(
                index=g.index,
                uuid=g.uuid,
                type_name=g.type_name,
                memory_total_mib=g.memory_total_mib,
                mig_mode=g.mig_mode,
                mig_devices=[
                    MigDeviceDescription(uuid=m.uuid, profile=m.profile, memory_total_mib=m.memory_total_mib)
                    for m in g.mig_devices
                ],
            )
            for g in gpus
        ],
    )


class NodeAgent:
    """Joins the fleet, heartbeats, and serves the node's activities until told to stop."""

    def __init__(
        self,
        options: NodeOptions,
        discovery: GpuDiscovery,
        control_plane: ControlPlane,
        replicas: ReplicaManager,
        transfers: TransferLog | None = None,
    ) -> None:
        self.options = options
        self.discovery = discovery
        self.control_plane = control_plane
        self.replicas = replicas
        # Measured fills (the replicas record them), sent with the next heartbeat for the pool to learn rates from.
        self.transfers = transfers or TransferLog()
        self.peer_tickets = PeerTickets(control_plane.api_url, options.node_id, lambda: self.node_secret)
        self.peer_server: PeerServer | None = None
        self.node_secret: str | None = None
        self.stopping = asyncio.Event()
        self._gpus: list[GpuInfo] = []
        # What /readyz reads, from its own thread: plain values, written by the event loop only.
        self._beat_ok_at: float | None = None  # time.monotonic() of the last heartbeat the control plane took
        self._beat_failure: str | None = None  # why the last heartbeat failed; None once one gets through
        self._status: NodeStatus | None = None  # as the control plane last said
        self.refused: CredentialRefused | None = None  # the control plane refused the secret: the node stops
        self._probes_started = False
        # What the simulated GPUs' utilization is read against: each replica's busy seconds at the last heartbeat.
        self._busy_seen: dict[str, float] = {}
        self._busy_read_at: float | None = None

    @property
    def secret_path(self) -> Path:
        return self.options.cache_dir / SECRET_FILE

    async def join(self) -> None:
        """Register (again); raises `JoinRefused`/`ControlPlaneUnreachable` for the caller to report."""
        if not self._gpus:
            self._gpus = self.discovery.discover()
        remembered = self.node_secret or self._read_secret()
        reg = registration(self.options, self._gpus, self.replicas.cache.capacity_bytes)
        joined = await self.control_plane.register(reg, remembered, wait_s=self.options.register_wait_s)
        self.node_secret = joined.node_secret
        self._write_secret(joined.node_secret)
        log.info(
            "node %s joined the fleet at %s with %d GPU(s)",
            self.options.node_id,
            self.control_plane.api_url,
            len(self._gpus),
        )
        self._note_status(joined.node.status)

    async def join_unless_stopped(self) -> bool:
        """`join`, unless SIGTERM comes first (the control plane may be down for a minute): False then.

        The model client is loaded first: once the node has joined, steps are placed on it, and a
        first step that waited seconds for that import would be taken for a lost node.
        """
        await asyncio.to_thread(warm_up)
        joining = asyncio.create_task(self.join())
        stop = asyncio.create_task(self.stopping.wait())
        await asyncio.wait([joining, stop], return_when=asyncio.FIRST_COMPLETED)
        stop.cancel()
        if not joining.done():
            joining.cancel()
            return False
        joining.result()  # the refusal, if any
        return True

    def heartbeat_body(self) -> NodeHeartbeat:
        self._simulate_gpu_use()
        return NodeHeartbeat(
            node_id=self.options.node_id,
            leaving=self.stopping.is_set(),
            gpus=[
                GpuHealth(
                    index=m.index,
                    memory_used_mib=m.memory_used_mib,
                    utilization_pct=m.utilization_pct,
                    ecc_errors=m.ecc_errors,
                    healthy=m.healthy,
                    reason=m.unhealthy_reason,
                )
                for m in self.discovery.sample()
            ],
            cached_weights=[
                CachedModelWeights(model=w.model, size_bytes=w.size_bytes) for w in self.replicas.cache.contents()
            ],
            replicas=self.replicas.reports(),
            peer_port=self.peer_server.port if self.peer_server is not None else None,
            # Bound to every address, it is reached where its heartbeats come from (the control plane says so).
            peer_host=None if self.options.metrics_host in ("0.0.0.0", "::") else self.options.metrics_host,
            transfers=self.transfers.drain(),
        )

    async def heartbeat(self) -> None:
        """One heartbeat; a control plane that forgot the node gets a registration first."""
        assert self.node_secret is not None, "join() before heartbeat()"
        beat = self.heartbeat_body()
        try:
            try:
                view = await self.control_plane.heartbeat(beat, self.node_secret)
            except NodeUnknown as exc:
                log.warning("%s; registering again", exc)
                await self.join()
                view = await self.control_plane.heartbeat(beat, self.node_secret)
        except (ControlPlaneError, httpx.HTTPError) as exc:
            self._beat_failure = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            self.transfers.restore(beat.transfers)  # measured once: they go with a later beat
            raise
        self._beat_ok_at, self._beat_failure = time.monotonic(), None
        self._note_status(view.status)
        if view.preempt_by is not None and not self.stopping.is_set():
            # A preemption notice: stop taking work now; generations stop at once and hand their text over.
            log.warning("node %s is preempted: leaving by %s", self.options.node_id, view.preempt_by.isoformat())
            self.stopping.set()

    def _note_status(self, status: NodeStatus) -> None:
        if status == "pending" and self._status != "pending":
            log.warning(
                "node %s waits for approval: it joined with the cluster token, and gets no work until an"
                " operator runs `berth nodes approve %s`",
                self.options.node_id,
                self.options.node_id,
            )
        elif self._status == "pending" and status != "pending":
            log.info("node %s was approved: it takes work now", self.options.node_id)
        self._status = status

    def readiness(self) -> str | None:
        """None when the node has joined and its last heartbeat got through recently; else why not (/readyz)."""
        if self.stopping.is_set():
            return "the node is leaving the fleet"
        if self.node_secret is None:
            return f"not registered with the control plane at {self.control_plane.api_url} yet"
        if self._status == "pending":
            return f"waiting for an operator's approval (berth nodes approve {self.options.node_id})"
        if self._beat_failure is not None:
            return f"the last heartbeat failed: {self._beat_failure}"
        if self._beat_ok_at is None:
            return "registered; no heartbeat has got through yet"
        silent_s = time.monotonic() - self._beat_ok_at
        if silent_s > READY_WITHIN_BEATS * self.options.heartbeat_s:
            return f"no heartbeat has got through for {silent_s:.0f} s"
        return None

    def start_probes(self) -> None:
        """Serve /metrics, /healthz and /readyz on the metrics port (none without one); before `join`, so a
        node still waiting for its control plane answers /healthz and says why it is not ready."""
        if self._probes_started:
            return
        self._probes_started = True
        serve_node_metrics(
            self.options.metrics_host,
            self.options.metrics_port,
            self.options.node_id,
            self.options.datacenter,
            self.discovery,
            self.replicas.reports,
            ready=self.readiness,
        )

    async def heartbeat_loop(self) -> None:
        """Beat every `heartbeat_s` until stopping; a failed beat is logged and the next one tried, unless the
        control plane refused the node's secret: then the node stops."""
        while not self.stopping.is_set():
            try:
                await self.heartbeat()
            except CredentialRefused as exc:
                self.refused = exc
                self.stopping.set()
                return
            except (ControlPlaneError, httpx.HTTPError) as exc:
                log.warning("heartbeat failed: %s", exc)
            try:
                await asyncio.wait_for(self.stopping.wait(), self.options.heartbeat_s)
            except TimeoutError:
                pass

    def worker(self, client: Client) -> Worker:
        node_id = self.options.node_id
        books = RemoteStepBooks(self.control_plane.api_url, node_id, lambda: self.node_secret)
        router = ReplicaRouter(node_id, self.replicas, tokenizers_under(self.options.cache_dir))
        generation = NodeGeneration(LlmStepActivities(books, router), self.replicas)
        return Worker(
            client,
            task_queue=node_task_queue(node_id),
            activities=[*NodeActivities(self.replicas).all(), generation.generate],
            activity_executor=ThreadPoolExecutor(max_workers=64),
            # Every lease on this node's replicas is a generation here at once (a replica takes
            # up to 32): the pool bounds them, so the worker must not queue them behind a limit
            # and let a step's pickup timeout take the node for lost.
            max_concurrent_activities=1024,
            # A generation's heartbeat carries the text written so far: what survives a kill -9
            # is what the last one that reached Temporal carried. The SDK's default throttle
            # (0.8 × the 5 s heartbeat timeout) would lose up to 4 s of tokens; send each beat
            # (activities/llm_step.py beats every 0.5 s while tokens stream).
            max_heartbeat_throttle_interval=timedelta(seconds=HEARTBEAT_EVERY_S),
            graceful_shutdown_timeout=timedelta(seconds=GRACEFUL_SHUTDOWN_S),
        )

    async def _start_peer_server(self) -> None:
        """Serve verified cache files to the datacenter's nodes that hold a ticket the control plane checks, and
        the running steps' text to the control plane (on a ticket it minted)."""
        if self.options.peer_port is None:
            return
        self.peer_server = PeerServer(
            CacheBlobs(self.replicas.cache),
            self.peer_tickets,
            host=self.options.metrics_host,
            port=self.options.peer_port,
            limit_bytes_per_s=self.options.peer_limit_bytes_per_s,
            routes=[writing_route(self.options.node_id, lambda: self.node_secret, BOARD)],
        )
        await self.peer_server.start()
        log.info(
            "node %s serves its weights to peers on %s:%d",
            self.options.node_id,
            self.options.metrics_host,
            self.peer_server.port,
        )

    async def serve(self, client: Client) -> bool:
        """Poll for work, join, heartbeat until `stopping` is set, then shut down in order; False when told to
        stop before the control plane took the join. Join errors (`JoinRefused`, `ControlPlaneUnreachable`)
        propagate once the worker has stopped, and a refused secret (`CredentialRefused`: the node was revoked)
        once the whole node has.

        The worker polls before the node joins: once joined, steps are placed here and must be picked up within
        seconds, or the workflow takes the node for lost. On a loaded machine building the worker took longer
        than that, and a node that joined first lost its first steps to other nodes.
        """
        self.start_probes()
        worker = self.worker(client)
        running = asyncio.create_task(worker.run())
        log.info("node %s polling %s", self.options.node_id, node_task_queue(self.options.node_id))
        try:
            joined = await self.join_unless_stopped()
        except BaseException:
            await self._stop_worker(worker, running)
            raise
        if not joined:
            await self._stop_worker(worker, running)
            return False
        await self._start_peer_server()
        beats = asyncio.create_task(self.heartbeat_loop())
        stop = asyncio.create_task(self.stopping.wait())
        await asyncio.wait([running, stop], return_when=asyncio.FIRST_COMPLETED)
        self.stopping.set()
        try:
            if self.refused is None:
                await self.heartbeat()  # "leaving": the pool places nothing new here while the worker stops
        except (ControlPlaneError, httpx.HTTPError) as exc:
            log.warning("could not say the node is leaving: %s", exc)
        try:
            # No new activities; generations stop now, loads get GRACEFUL_SHUTDOWN_S.
            await self._stop_worker(worker, running)
        finally:
            await beats
            await self.replicas.stop_all(self.options.replica_grace_s)
            if self.peer_server is not None:
                await self.peer_server.stop()
            try:
                if self.refused is None:
                    await self.heartbeat()  # the replicas are gone: say so before going quiet
            except (ControlPlaneError, httpx.HTTPError) as exc:
                log.warning("last heartbeat failed: %s", exc)
            log.info("node %s stopped", self.options.node_id)
        if self.refused is not None:
            raise self.refused
        return True

    @staticmethod
    async def _stop_worker(worker: Worker, running: asyncio.Task) -> None:
        if not running.done():
            await worker.shutdown()
        await running

    def install_signal_handlers(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stopping.set)

    def _read_secret(self) -> str | None:
        try:
            return self.secret_path.read_text().strip() or None
        except FileNotFoundError:
            return None

    def _write_secret(self, secret: str) -> None:
        self.options.cache_dir.mkdir(parents=True, exist_ok=True)
        # Created owner-only: the secret is what lets anyone heartbeat as this node.
        fd = os.open(self.secret_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secret)

    def _simulate_gpu_use(self) -> None:
        """Simulated GPUs show the memory their replicas hold, as NVML would for real ones, and as their utilization
        the share of the time since the last heartbeat during which a generation ran on them (they reported 0 while
        generating, so the console's chart of a busy simulated fleet read 0% throughout)."""
        if not isinstance(self.discovery, SimulatedDiscovery):
            return
        now = time.monotonic()
        elapsed = now - self._busy_read_at if self._busy_read_at is not None else 0.0
        shares, self._busy_seen = busy_shares(self.replicas.replicas(), self._busy_seen, elapsed, now)
        self._busy_read_at = now
        used: dict[int, int] = {g.index: 0 for g in self._gpus}
        for replica in self.replicas.replicas():
            if replica.state == "warm":
                per_gpu = replica.entry.memory_need_gib * 1024 / max(len(replica.gpu_indexes), 1)
                for index in replica.gpu_indexes:
                    used[index] = used.get(index, 0) + round(per_gpu)
        for index, mib in used.items():
            try:
                self.discovery.set_load(index, shares.get(index, 0.0), mib)
            except ValueError:
                pass  # a replica on a GPU index the node does not have was refused at load already
