"""The node's replicas: start them through the right engine, wait for readiness, stop them, report them.

A replica is loading from `start` until the engine says it serves the model, warm after, and
draining while it stops. Readiness and liveness stay separate (see
`orchestrator.engines.replicas.protocol`): a loading replica is never stopped for being slow,
only for dying, and then the load fails with the end of its log so the caller sees why.

The weights cache is told at each step. A model with real weights (catalogue `weights`): its
revision is planned (`ensure_revision`: a disk load, or room reserved), fetched for real from the
tier asked (a datacenter source when the node has one, else or on its failure the origin; bytes
and seconds measured), pinned, and the engine is started on the cache's local copy
(`ReplicaSpec.weights_path`: the revision's directory, or llama.cpp's .gguf file). A simulated
model: `ensure` before the start, `record_loaded` + `pin` once the replica serves (the simulated
engine itself waits out the fetch its tier would take). Either is unpinned when the replica stops,
and stays on disk for the next load.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.engines.replicas import ReplicaEngine, ReplicaHandle, ReplicaSpec, ReplicaStartError, replica_spec
from orchestrator.engines.replicas.processes import log_tail
from sdk.wire.catalogue import ModelEntry
from sdk.wire.fleet import ReplicaReport, ReplicaState
from sdk.wire.node_io import FetchSource, LoadedTier

from ..weights.files import Revision
from .metrics import record_fetch, record_load
from .weights_cache import LoadPlan, WeightsCache
from .weights_fill import FillReport, RevisionSource, fill_from_origin

log = logging.getLogger("berth.node.replicas")

# How often a loading replica is probed: /v1/models answers in milliseconds once up, and a
# 0.25 s probe costs nothing next to a load of seconds to minutes.
READY_PROBE_S = 0.25
# How often a fetch in progress reports (the load activity heartbeats there): well inside any heartbeat
# timeout, and a 140 GB fetch from origin takes minutes.
FETCH_PROGRESS_S = 1.0


class ReplicaLoadError(RuntimeError):
    """A replica could not be started or died before it served; the message carries its log tail."""


@dataclass
class Replica:
    """One replica as the node tracks it (the heartbeat's `ReplicaReport` plus what the node needs)."""

    replica_id: str
    entry: ModelEntry
    gpu_indexes: tuple[int, ...]
    state: ReplicaState
    tier: LoadedTier
    handle: ReplicaHandle | None = None
    started_at: float = 0.0
    load_seconds: float = 0.0
    outstanding_tokens: int = 0  # filled in once generation runs on the node
    active_leases: int = 0
    ready: asyncio.Event = field(default_factory=asyncio.Event)  # set once loaded, or once its load failed
    error: str | None = None
    fill: FillReport | None = None  # what was fetched for this load, measured; None for a disk or simulated load
    pinned: bool = False  # holds a pin on its weights in the cache
    busy_s: float = 0.0  # seconds during which at least one generation ran on it, summed
    busy_since: float | None = None  # the monotonic time its current run of generations began

    def generation_started(self, now: float) -> None:
        if self.active_leases == 0:
            self.busy_since = now
        self.active_leases += 1

    def generation_ended(self, now: float) -> None:
        self.active_leases -= 1
        if self.active_leases <= 0 and self.busy_since is not None:
            self.busy_s += max(0.0, now - self.busy_since)
            self.busy_since = None

    def busy_seconds(self, now: float) -> float:
        """Seconds it has spent generating, the generations running now counted up to `now`."""
        return self.busy_s + (max(0.0, now - self.busy_since) if self.busy_since is not None else 0.0)

    def report(self) -> ReplicaReport:
        return ReplicaReport(
            replica_id=self.replica_id,
            model=self.entry.name,
            gpu_indexes=list(self.gpu_indexes),
            state=self.state,
            outstanding_tokens=self.outstanding_tokens,
            active_leases=self.active_leases,
        )


EngineFactory = Callable[[ModelEntry], ReplicaEngine]


def busy_shares(
    replicas: list[Replica], seen: Mapping[str, float], elapsed_s: float, now: float
) -> tuple[dict[int, float], dict[str, float]]:
    """Each GPU's share (0..1) of the last `elapsed_s` during which a generation ran on a replica there, and each
    replica's busy seconds now (the `seen` of the next reading). What a simulated GPU reports as its utilization:
    NVML's is likewise the share of a recent period during which a kernel ran. A replica not seen before counts
    from 0 (it began within the period); over several replicas on one GPU the shares add up, to at most 1."""
    shares: dict[int, float] = {}
    busy = {r.replica_id: r.busy_seconds(now) for r in replicas}
    for replica in replicas:
        ran = busy[replica.replica_id] - seen.get(replica.replica_id, 0.0)
        share = min(1.0, max(0.0, ran / elapsed_s)) if elapsed_s > 0 else 0.0
        for index in replica.gpu_indexes:
            shares[index] = min(1.0, shares.get(index, 0.0) + share)
    return shares, busy


class ReplicaManager:
    """Loads, tracks and stops this node's replicas.

    `engines` maps a catalogue engine kind ("simulated", "vllm", "sglang", "llama.cpp",
    "openai-compatible") to the adapter serving it; a kind without one is refused by name.
    `sources` fill real revisions by tier (the origin's is built in; a datacenter one is added by
    the node when it has peers); `on_fill` hears every measured fill. `fetch_delay_s` says how long a
    simulated prewarm from a tier takes (the simulated node sleeps it, scaled).
    """

    def __init__(
        self,
        cache: WeightsCache,
        engines: Mapping[str, ReplicaEngine],
        gpu_indexes: set[int] | None = None,
        fetch_delay_s: Callable[[FetchSource, int], float] = lambda tier, size: 0.0,
        clock: Callable[[], float] = time.monotonic,
        sources: Mapping[FetchSource, RevisionSource] | None = None,
        on_fill: Callable[[FillReport], None] | None = None,
    ) -> None:
        self.cache = cache
        self.engines = dict(engines)
        self.gpu_indexes = gpu_indexes  # the node's GPUs; None accepts any index
        self._fetch_delay_s = fetch_delay_s
        self._clock = clock
        self.sources: dict[FetchSource, RevisionSource] = {"origin": fill_from_origin, **(sources or {})}
        self._on_fill = on_fill
        self._replicas: dict[str, Replica] = {}

    def replicas(self) -> list[Replica]:
        return list(self._replicas.values())

    def get(self, replica_id: str) -> Replica | None:
        return self._replicas.get(replica_id)

    def reports(self) -> list[ReplicaReport]:
        return [r.report() for r in self._replicas.values()]

    def engine_for(self, entry: ModelEntry) -> ReplicaEngine:
        if entry.provider != "self-hosted":
            raise ReplicaLoadError(f"model {entry.name!r} is hosted by a provider; nodes load only self-hosted models")
        engine = self.engines.get(entry.engine)
        if engine is None:
            hint = (
                " (start the node with --external-url for an OpenAI-compatible server)"
                if entry.engine == "openai-compatible"
                else ""
            )
            raise ReplicaLoadError(f"model {entry.name!r}: this node has no {entry.engine!r} engine{hint}")
        return engine

    async def load(
        self,
        entry: ModelEntry,
        gpu_indexes: tuple[int, ...],
        replica_id: str,
        source: FetchSource = "origin",
        on_progress: Callable[[Replica], None] | None = None,
    ) -> Replica:
        """Start replica `replica_id` and return it once it serves; idempotent for a retried load.

        `on_progress` is called at every readiness probe (the activity heartbeats there). A
        cancelled load (the activity was cancelled or timed out) stops the replica it started.
        """
        existing = self._replicas.get(replica_id)
        if existing is not None:
            return await self._await_existing(existing, entry, gpu_indexes, on_progress)
        engine = self.engine_for(entry)
        self._check_gpus(entry, gpu_indexes)
        revision = Revision.of(entry)
        size = round(entry.weights_gib * 2**30)
        plan = (
            self.cache.ensure(entry.name, size, source)
            if revision is None
            else self.cache.ensure_revision(revision, source)
        )
        replica = Replica(replica_id, entry, tuple(gpu_indexes), "loading", plan.tier, started_at=self._clock())
        self._replicas[replica_id] = replica
        try:
            if revision is None:
                spec = replica_spec(entry, replica_id, gpu_indexes, plan)
            else:
                spec = await self._local_copy(entry, revision, plan, replica, source, on_progress)
            replica.handle = await engine.start(spec)
            log.info(
                "replica %s of %s loading on GPUs %s from %s", replica_id, entry.name, list(gpu_indexes), replica.tier
            )
            await self._wait_ready(engine, replica, on_progress)
            if replica.state == "draining":  # unloaded between the last probe and now
                raise ReplicaLoadError(f"replica {replica_id} was unloaded while it loaded")
        except BaseException as exc:
            replica.error = str(exc) or type(exc).__name__
            if revision is None:
                self.cache.release(entry.name)
            else:
                self.cache.release_revision(revision.digest)  # a committed copy stays on disk, unpinned
            self._unpin(replica)
            self._replicas.pop(replica_id, None)
            if replica.handle is not None:
                await asyncio.shield(engine.stop(replica.handle, grace_s=2.0))
            replica.ready.set()
            if isinstance(exc, ReplicaStartError):
                raise ReplicaLoadError(str(exc)) from exc
            raise
        if revision is None:
            self.cache.record_loaded(entry.name, size)
            self.cache.pin(entry.name)
            replica.pinned = True
        replica.state = "warm"
        replica.load_seconds = self._clock() - replica.started_at  # the fetch, if any, and the engine's start
        replica.ready.set()
        log.info("replica %s of %s warm after %.2fs", replica_id, entry.name, replica.load_seconds)
        record_load(entry.name, replica.tier, replica.load_seconds)
        return replica

    async def _local_copy(
        self,
        entry: ModelEntry,
        revision: Revision,
        plan: LoadPlan,
        replica: Replica,
        source: FetchSource,
        on_progress: Callable[[Replica], None] | None,
    ) -> ReplicaSpec:
        """Fetch `revision` unless the cache has it, pin it, and the spec that starts the engine on its copy."""
        if plan.tier != "disk":
            replica.fill = await self._fill(revision, source, lambda: on_progress(replica) if on_progress else None)
            replica.tier = replica.fill.tier
        self.cache.pin_revision(revision.digest)  # before the engine reads it: no eviction under a load
        replica.pinned = True
        on_disk = LoadPlan(entry.name, "disk", 0, [], revision.digest, plan.path)
        return replica_spec(
            entry,
            replica.replica_id,
            replica.gpu_indexes,
            on_disk,
            weights_path=str(weights_path(entry, revision, self.cache.revision_path(revision.digest))),
        )

    async def _fill(self, revision: Revision, source: FetchSource, on_progress: Callable[[], None]) -> FillReport:
        """Fill `revision` from `source`, falling back to the origin; the measured report of the tier that did."""
        tiers: list[FetchSource] = [source] if source == "origin" else [source, "origin"]
        for tier in tiers:
            fill = self.sources.get(tier)
            if fill is None:
                log.info("no %s source on this node for %s; fetching from origin", tier, revision.model)
                continue
            stop = threading.Event()
            task = asyncio.ensure_future(fill(self.cache, revision, stop=stop))
            try:
                while not task.done():
                    on_progress()
                    await asyncio.wait({task}, timeout=FETCH_PROGRESS_S)
                report = task.result()
            except asyncio.CancelledError:
                stop.set()  # the fetch threads stop at their next chunk; what arrived stays as partials
                await asyncio.gather(task, return_exceptions=True)
                raise
            except Exception as exc:  # noqa: BLE001 - any failure of a nearer tier is a reason to try origin
                if tier == "origin":
                    raise
                log.warning("%s from %s failed (%s); fetching from origin", revision.model, tier, exc)
                continue
            record_fetch(revision.model, report.tier, report.bytes_fetched, report.seconds)
            if self._on_fill is not None:
                self._on_fill(report)
            return report
        raise AssertionError("unreachable: the origin source is always tried")  # pragma: no cover

    def _check_gpus(self, entry: ModelEntry, gpu_indexes: tuple[int, ...]) -> None:
        missing = sorted(set(gpu_indexes) - self.gpu_indexes) if self.gpu_indexes is not None else []
        if missing:
            raise ReplicaLoadError(
                f"gpu_indexes: this node has no GPU {missing[0]} (it has {sorted(self.gpu_indexes or [])})"
            )
        if len(gpu_indexes) not in entry.tensor_parallel:
            raise ReplicaLoadError(
                f"gpu_indexes: {entry.name} runs on {entry.tensor_parallel} GPU(s), got {len(gpu_indexes)}"
            )

    async def _await_existing(
        self,
        replica: Replica,
        entry: ModelEntry,
        gpu_indexes: tuple[int, ...],
        on_progress: Callable[[Replica], None] | None,
    ) -> Replica:
        if replica.entry.name != entry.name or replica.gpu_indexes != tuple(gpu_indexes):
            raise ReplicaLoadError(
                f"replica_id {replica.replica_id!r} already runs {replica.entry.name} on GPUs "
                f"{list(replica.gpu_indexes)}"
            )
        while not replica.ready.is_set():
            if on_progress is not None:
                on_progress(replica)
            try:
                await asyncio.wait_for(replica.ready.wait(), READY_PROBE_S * 4)
            except TimeoutError:
                pass
        if replica.error is not None or replica.state == "draining":
            raise ReplicaLoadError(f"replica {replica.replica_id!r} did not load: {replica.error or 'it is stopping'}")
        return replica

    async def _wait_ready(
        self, engine: ReplicaEngine, replica: Replica, on_progress: Callable[[Replica], None] | None
    ) -> None:
        assert replica.handle is not None
        while not await engine.ready(replica.handle):
            if not await engine.alive(replica.handle):
                tail = log_tail(replica.handle.log_path).strip()
                raise ReplicaLoadError(
                    f"replica {replica.replica_id} of {replica.entry.name} died while loading"
                    + (f"; log tail:\n{tail}" if tail else "")
                )
            if on_progress is not None:
                on_progress(replica)
            await asyncio.sleep(READY_PROBE_S)

    async def unload(self, replica_id: str, grace_s: float = 10.0) -> bool:
        """Stop a replica (SIGTERM, then SIGKILL after `grace_s`); False if the node has no such replica.

        Its weights stay on disk, unpinned, so the next load of the model is a disk load.
        """
        replica = self._replicas.get(replica_id)
        if replica is None:
            return False
        if replica.state == "loading":
            # The load activity owns a loading replica; cancelling it there stops the process.
            replica.state = "draining"
            replica.error = "unloaded while loading"
        was_warm = replica.state == "warm"
        replica.state = "draining"
        try:
            if replica.handle is not None:
                await self.engine_for(replica.entry).stop(replica.handle, grace_s)
        finally:
            self._replicas.pop(replica_id, None)
            if was_warm:  # a loading replica's pin is its load's to give back
                self._unpin(replica)
        log.info("replica %s of %s stopped", replica_id, replica.entry.name)
        return True

    def _unpin(self, replica: Replica) -> None:
        if not replica.pinned:
            return
        replica.pinned = False
        revision = Revision.of(replica.entry)
        if revision is None:
            self.cache.unpin(replica.entry.name)
        else:
            self.cache.unpin_revision(revision.digest)

    async def stop_all(self, grace_s: float = 10.0) -> None:
        """Stop every replica at once (the node is shutting down)."""
        await asyncio.gather(*(self.unload(r, grace_s) for r in list(self._replicas)), return_exceptions=True)

    async def prewarm(
        self,
        entry: ModelEntry,
        size_bytes: int | None = None,
        source: FetchSource = "origin",
        on_progress: Callable[[], None] | None = None,
    ) -> str:
        """Put `entry`'s weights on disk without loading them; the tier they came from ("disk" if already there).

        `on_progress` is called about once a second while the weights arrive (a 70B fetch from
        origin takes minutes; the activity heartbeats there).
        """
        revision = Revision.of(entry)
        if revision is not None:  # real weights: the revision's own size, fetched for real
            plan = self.cache.ensure_revision(revision, source)
            if plan.tier == "disk":
                return "disk"
            try:
                report = await self._fill(revision, source, on_progress or (lambda: None))
            except BaseException:
                self.cache.release_revision(revision.digest)
                raise
            return report.tier
        size = size_bytes or round(entry.weights_gib * 2**30)
        plan = self.cache.ensure(entry.name, size, source)
        if plan.tier == "disk":
            return "disk"
        try:
            deadline = self._clock() + self._fetch_delay_s(source, plan.bytes_to_fetch)
            while (left := deadline - self._clock()) > 0:
                if on_progress is not None:
                    on_progress()
                await asyncio.sleep(min(left, 1.0))
        except BaseException:
            self.cache.release(entry.name)
            raise
        self.cache.record_loaded(entry.name, size)
        return plan.tier


def weights_path(entry: ModelEntry, revision: Revision, directory: Path) -> Path:
    """What the engine opens: llama.cpp one .gguf file (a split one's first part), every other engine the
    revision's directory, laid out as the revision names its files."""
    if entry.engine == "llama.cpp":
        gguf = revision.main_file(".gguf")
        if gguf is None:
            raise ReplicaLoadError(f"model {entry.name!r}: a llama.cpp replica needs a .gguf file among its weights")
        return directory / gguf.path
    return directory
