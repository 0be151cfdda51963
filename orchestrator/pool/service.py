"""The pool service: leases over the in-memory fleet, kept in step with the store.

It runs in the orchestrator worker, behind the `berth.pool.acquire` / `berth.pool.release`
local activities, so a lease costs a dictionary update and one SQLite write instead of a
Temporal round trip. The fleet it places on is rebuilt from what node agents report
(`sync`, at most every `sync_every_s`); what only the pool knows is layered on top:
- bookings: a lease counts as load on its replica from the moment it is granted;
- replicas it placed that no node reports yet (their load is still being scheduled);
- the wait queue and each replica's idle clock (the scaler reads both).

A node's report is believed only as far as the pool can check it. A replica it reports is served from
only when a pool started it: its GPU reservation (store/reservations.py) is that pool's record of the
load, kept until the replica is known gone, so a replica is adopted again after a control-plane
restart. A replica with no record is the node's word alone ("claimed, unproven"): its memory counts,
since a node knows what is on its own GPUs, but no lease goes to it. Before, a node whose heartbeat
claimed four warm replicas at $0.01/h took 30 of 36 steps of two tenants and read their conversations.

Locking: acquire and release run in the activity thread pool, the scaler on the event
loop's executor; one lock guards the fleet, and decisions take well under a millisecond.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Protocol

from sdk.wire.catalogue import ModelEntry, ModelForesight, ScalingPolicy
from sdk.wire.fleet import UNADMITTED, NodeView, ReplicaView
from sdk.wire.lease import (
    Direct,
    LeaseGrant,
    LeaseRequest,
    LocalityTier,
    Never,
    NextStep,
    NodeLiveness,
    Placed,
    ReleaseLease,
    Wait,
)
from sdk.wire.limits import SUB_AGENT_MARK
from sdk.wire.node_io import FetchSource, LoadOnNode, LoadReplica

from ..store import LeaseRecord, Reservation, Store
from .admission import (
    defers_to_a_busy_replica,
    load_in_flight,
    may_go,
    place_away_from_reclaimed_spot,
    place_scaler_replica,
    starts_replica,
)
from .decision import Decision, PlacementRequest
from .fleet import Booking, FleetState, Replica, StaleDecision
from .fleet import Tenant as PoolTenant
from .foresight_view import foresight_views
from .intents import IntentBook
from .inventory import model_spec, node_from_view
from .liveness import node_liveness
from .metrics import record_decision, record_grant, record_judgement, watch_attainment, watch_queue
from .placement_policy import baseline_named
from .queue import WaitQueue
from .scaler import DEFAULT_POLICY, Foresight, ModelDemand, ScaleDown, ScaleUp, plan_scaling
from .serving_speed import judge
from .weights import DEFAULT_CONFIG, PlacementConfig

log = logging.getLogger("berth.pool")

# A replica the pool placed is reported by its node once the load activity starts there:
# within a heartbeat or two. Past this, an unreported placement is taken to have failed.
UNREPORTED_LOAD_GRACE_S = 60.0
# A placement that starts a replica re-reads the fleet when its view is older than this.
COLD_PLACEMENT_FRESHNESS_S = 0.2
# How long a replica reported gone is ignored in node reports: many heartbeats past the last stale one.
GONE_MEMORY_S = 600.0
# A heartbeat this long after a replica was reported gone (three of a real node's 5 s beats) that
# still lists it is no stale report: the node runs it. A step is cut off as if its replica had gone
# also when its node was merely too busy to pick the call up in time (a burst on a small machine);
# ignoring that replica for GONE_MEMORY_S hid a healthy replica and placed new ones past max_replicas.
GONE_CONFIRM_S = 15.0
# The fleet holds a replica a node claims without a record under this prefix and its node's id, never under the
# id the node gave: a node naming an id the pool is about to give a replica of its own must not take that id.
CLAIM_PREFIX = "claim:"


class CatalogueReader(Protocol):
    """What the pool needs of the model catalogue (orchestrator.catalogue.ModelCatalogue)."""

    def get(self, name: str) -> ModelEntry | None: ...


@dataclass
class _Lease:
    record: LeaseRecord
    booking: Booking
    grant: Placed
    service_class: str = "interactive"
    served_from: float | None = None  # when it was granted on a warm replica: its hold is what a slot turns over in


class PoolService:
    def __init__(
        self,
        store: Store,
        catalogue: CatalogueReader,
        config: PlacementConfig = DEFAULT_CONFIG,
        *,
        sync_every_s: float = 1.0,
        node_lost_after_s: float = 20.0,
        clock: Callable[[], float] = time.monotonic,
        pool_id: str = "",
        placement_policy: str = "berth",
    ) -> None:
        self.store = store
        # The Kubernetes-style baseline that takes over placement and scaling (placement_policy.py), or None:
        # Berth's own. Chosen once, to measure both live on one machine; see `_place`, `start_replica`, `plan_scaling`.
        self.baseline = baseline_named(placement_policy, config)
        # This pool's name among the pools of several control-plane replicas on one database: its leases
        # and GPU reservations carry it, and every other pool's count as load it did not book itself.
        self.pool_id = pool_id
        self.catalogue = catalogue
        self.config = config
        self.sync_every_s = sync_every_s
        self.node_lost_after_s = node_lost_after_s
        self.clock = clock
        self.fleet = FleetState(replica_prefix=f"r-{uuid.uuid4().hex[:6]}-")
        self.queue = WaitQueue()
        watch_queue(self._queue_depth)
        watch_attainment(self._slo_attainment)
        self.policies: dict[str, ScalingPolicy] = {}
        self.idle_since: dict[str, float] = {}
        # The scaler's learning (idle gaps per model and level) and the steps tasks announced (scaler.py).
        self.foresight = Foresight(config=config)
        self._lock = threading.RLock()
        self._leases: dict[str, _Lease] = {}
        self._by_step: dict[tuple[str, int], str] = {}
        self._unreported: dict[str, float] = {}  # replica id → when the pool placed it
        self._unloading: set[str] = set()
        # Replicas a node said it no longer has: its last report may still list them until its
        # next heartbeat, and a replica id never comes back, so they are not re-added from it
        # (unless a heartbeat well after the news still lists it). Id → (clock, wall time) of the news.
        self._gone: dict[str, tuple[float, datetime]] = {}
        self._synced_at = float("-inf")
        self._restored = False
        # Leases a restarted pool found in the store on replicas no node reports yet (their load had only
        # just been sent): lease id → (record, when found). Counted once a node reports the replica.
        self._unclaimed: dict[str, tuple[LeaseRecord, float]] = {}
        # Replica id → (leases, tokens) other pools hold on it, as of the last sync (already in its load).
        self._foreign: dict[str, tuple[int, int]] = {}
        # Replicas other pools started that no node reports yet: their GPUs are taken, but no lease of this
        # pool goes on them until the node reports them (the other pool may still give them up).
        self._others_loading: set[str] = set()
        self._disputed: set[tuple[str, str]] = set()  # (node, model) claims held back, as of the last sync
        self._joining = 0  # join tokens not yet used, as of the last sync: a fleet still forming never says never
        # Task id → when its step began waiting for a slot with no load of its model in flight: the wait that
        # more capacity would have cut, which the scaler's attainment counts (serving_speed.judge).
        self._slot_waits: dict[str, float] = {}

    # --- leases ----------------------------------------------------------------------------

    def _queue_depth(self) -> dict[str, tuple[int, float]]:
        """Steps waiting per model and the longest wait, for the queue gauges (read from a scrape's thread); every
        model the pool knows, at 0 when none waits, so the gauges do not vanish between waits."""
        with self._lock:
            return {**dict.fromkeys(self.fleet.models, (0, 0.0)), **self.queue.depth(self.clock())}

    def _slo_attainment(self) -> dict[tuple[str, str], tuple[float, float]]:
        """Per model and service class with judged grants in the traffic book's window: the share predicted to meet
        their objectives and the target, for the attainment gauges (read from a scrape's thread)."""
        with self._lock:
            now, traffic = self.clock(), self.foresight.traffic
            return {
                (model, cls): (traffic.attainment(model, now, cls).share, target)
                for model in self.fleet.models
                for cls, target in traffic.classes(model, now).items()
            }

    def acquire(self, req: LeaseRequest) -> LeaseGrant:
        started = time.perf_counter()
        grant = self._acquire(req)
        record_decision(req, grant, time.perf_counter() - started)
        return grant

    def _acquire(self, req: LeaseRequest) -> LeaseGrant:
        entry = self.catalogue.get(req.model)
        if entry is None:
            return Never(reason=f"unknown model {req.model!r}")
        if entry.provider == "hosted":
            return Direct(reason=f"{req.model} is served by its provider")
        now = self.clock()
        with self._lock:
            self.sync()
            held = self._by_step.get((req.task_id, req.step))
            if held is not None:  # a retried acquire: the lease it already made
                return self._leases[held].grant
            self._drop_unclaimed_for_step(req.task_id, req.step)
            self.fleet.add_model(model_spec(entry))
            self._intents.arrived(req.task_id, now, req.task_id.rpartition(SUB_AGENT_MARK)[0] or None)
            if not self.fleet.nodes:
                self._wait(req, now)
                return Wait(wait_reason="no_capacity", queue_position=1, reason="no GPU node has joined the fleet yet")
            ahead = self.queue.ahead_of(req.task_id, req.model, req.priority, now)
            request = _placement_request(
                req,
                self.policies.get(req.model, DEFAULT_POLICY).max_replicas,
                self.foresight.traffic.prompt_tokens(req.model, now),
            )
            decision = self._place(request)
            if starts_replica(decision) and self.clock() - self._synced_at > COLD_PLACEMENT_FRESHNESS_S:
                # A new replica costs seconds to minutes, so it is worth deciding on the nodes' latest
                # reports (weights that just arrived on a disk, a replica that just turned warm).
                self.sync(force=True)
                decision = self._place(request)
            if decision.outcome == "never" and not self._joining:
                self.queue.leave(req.task_id)
                return Never(reason=decision.reason or f"no node of this fleet can serve {req.model}")
            if decision.outcome == "never":  # machines still joining may hold it: wait for them
                self._wait(req, now)
                return Wait(
                    wait_reason="no_capacity",
                    queue_position=self.queue.ahead_of(req.task_id, req.model, req.priority, now) + 1,
                    reason=f"{decision.reason}; {self._joining} node(s) still joining may hold it",
                )
            if (
                decision.outcome == "placed"
                and may_go(self.fleet, decision, ahead)
                and not defers_to_a_busy_replica(self.fleet, decision)
            ):
                try:
                    return self._grant(req, entry, decision, now)
                except StaleDecision as exc:  # another control-plane replica took the GPUs: place again
                    log.info("placement went stale: %s", exc)
                    self.sync(force=True)
            self._wait(req, now)
            if req.task_id not in self._slot_waits and not load_in_flight(self.fleet, req.model):
                self._slot_waits[req.task_id] = now
            position = self.queue.ahead_of(req.task_id, req.model, req.priority, now) + 1
            if decision.outcome == "placed":
                return Wait(
                    wait_reason="queued",
                    queue_position=position,
                    reason=f"{position - 1} earlier step(s) for {req.model} go first",
                )
            return Wait(
                wait_reason=decision.wait_reason or "no_capacity",
                queue_position=position,
                reason=decision.reason or f"no replica of {req.model} is free",
            )

    def _wait(self, req: LeaseRequest, now: float) -> None:
        """Hold the step's place in the queue. It is demand for the scaler only when a replica the scaler starts
        could serve it: those are placed for no tenant, so never for a `low_priority` step (it starts none), nor
        for an isolated or dedicated tenant's (its own acquire starts its replicas where it may run). Before,
        one waiting step of a dedicated tenant had the scaler load replicas up to max_replicas on nodes that
        tenant could never use."""
        scaler_serves = req.service_class != "low_priority" and self.fleet.trust_of(req.tenant) == "shared"
        self.queue.refresh(req.task_id, req.model, req.priority, scaler_serves, now)

    def _place(self, request: PlacementRequest) -> Decision:
        """Where a step goes now: Berth's placement, or the baseline's Service routing when one is set."""
        if self.baseline is not None:
            return self.baseline.place(self.fleet, request)
        return place_away_from_reclaimed_spot(self.fleet, request, self.config)

    def release(self, req: ReleaseLease) -> None:
        """End a lease; idempotent. `replica_warm` says the step was served, so the replica serves."""
        with self._lock:
            self._unclaimed.pop(req.lease_id, None)
            lease = self._leases.pop(req.lease_id, None)
            if lease is not None:
                self._by_step.pop((lease.record.task_id, lease.record.step), None)
                if lease.served_from is not None and req.replica_warm:
                    self.foresight.traffic.held(lease.record.model, self.clock(), self.clock() - lease.served_from)
                if req.next_step is not None and lease.service_class != "low_priority":
                    self._announce(lease, req.next_step)
                replica = self.fleet.replicas.get(lease.booking.replica_id)
                if replica is not None and req.replica_warm and replica.state == "loading":
                    # It served; its node's next heartbeat lists it (until then it is still unreported, not
                    # gone: forgetting it here freed its GPUs in the store while it ran).
                    self.fleet.mark_warm(replica.id)
                self.fleet.release(lease.booking)
                replica = self.fleet.replicas.get(lease.booking.replica_id)
                if req.replica_gone:
                    self._gone[lease.booking.replica_id] = (self.clock(), datetime.now(UTC))
                    if replica is not None:  # kept on record: a node that still lists it later serves it again
                        self._forget_replica(replica.id, keep_record=True)
                elif replica is not None and replica.active_leases == 0:
                    self.idle_since[replica.id] = self.clock()
        self.store.leases.release(req.lease_id)
        if (
            lease is not None
            and lease.booking.created_replica
            and lease.booking.replica_id not in self.fleet.replicas
            and lease.booking.replica_id not in self._gone
        ):
            # Started for this step alone and given up before it loaded: no other pool leases a replica that
            # no node reports, so nothing else holds it.
            self.store.reservations.release(lease.booking.replica_id)

    @property
    def _intents(self) -> IntentBook:
        assert self.foresight.intents is not None  # the live pool always listens
        return self.foresight.intents

    def _announce(self, lease: _Lease, next_step: NextStep) -> None:
        """A served step said what its task does next: the scaler keeps (or starts) a replica for it."""
        record, now = lease.record, self.clock()
        if next_step.kind == "spawn":
            self._intents.announce_spawns(record.task_id, record.model, next_step.spawns, now)
        else:
            self._intents.announce(record.task_id, record.model, next_step.kind, now, record.replica_id)

    def _grant(self, req: LeaseRequest, entry: ModelEntry, decision: Decision, now: float) -> Placed:
        judged = judge(decision, self.fleet, self.config, now - self._slot_waits.get(req.task_id, now))
        booking = self.fleet.apply(decision, req.tokens)
        chosen = decision.chosen
        assert chosen is not None
        replica = self.fleet.replicas[booking.replica_id]
        if booking.created_replica:
            if not self._reserve(replica):
                self.fleet.release(booking)  # takes the replica it started with it
                raise StaleDecision(f"{replica.node_id} devices {replica.devices} were taken by another pool")
            self._unreported[replica.id] = now
        self.idle_since.pop(replica.id, None)
        self._intents.leased(replica.id, now)
        self._slot_waits.pop(req.task_id, None)
        traffic = self.foresight.traffic
        traffic.asked(req.model, now, req.prompt_tokens)
        if judged is not None:
            traffic.granted(req.model, now, judged.met, judged.fixable, judged.target, req.service_class)
            record_judgement(req.model, req.service_class, judged.met)
        waiter = self.queue.leave(req.task_id)
        record_grant(
            req.model, chosen.candidate.tier, None if waiter is None else now - waiter.since, booking.created_replica
        )
        record = LeaseRecord(
            lease_id=f"lease-{uuid.uuid4().hex[:12]}",
            task_id=req.task_id,
            step=req.step,
            model=req.model,
            node_id=replica.node_id,
            replica_id=replica.id,
            tokens=req.tokens,
            tenant=req.tenant,
            created_replica=booking.created_replica,
            pool_id=self.pool_id,
            limits=req.limits,
        )
        source: FetchSource = "datacenter" if chosen.candidate.tier == "datacenter" else "origin"
        grant = self._lease_grant(record, entry, chosen.candidate.tier, source).model_copy(
            update={"expected_ttft_s": round(chosen.terms["ttft"], 3), "decided_by": decision.decided_by}
        )
        served_from = now if replica.state == "warm" else None
        self._leases[record.lease_id] = _Lease(record, booking, grant, req.service_class, served_from)
        self._by_step[(req.task_id, req.step)] = record.lease_id
        stored = self.store.leases.add(record)
        if stored.lease_id != record.lease_id:
            # Another pool's lease for this step, whose grant never reached the workflow (its control-plane
            # replica died first, so the acquire ran again here): nobody will release it but this step.
            self.store.leases.release(stored.lease_id)
            self.store.leases.add(record)
        return grant

    def _reserve(self, replica: Replica) -> bool:
        """Take the new replica's GPU memory in the store, checked against every pool's (store.reservations)."""
        node = self.fleet.nodes[replica.node_id]
        wanted = Reservation(
            replica.id, node.id, replica.model, replica.devices, replica.per_device_gib, replica.boundary, self.pool_id
        )
        models = self.fleet.models
        return self.store.reservations.reserve(
            wanted,
            {d.index: d.memory_gib for d in node.devices},
            lambda model: models[model].memory_gib if model in models else 0.0,
            UNREPORTED_LOAD_GRACE_S,
        )

    def _lease_grant(self, record: LeaseRecord, entry: ModelEntry, tier: LocalityTier, source: FetchSource) -> Placed:
        """What the step is told about its lease: where it runs, what a token costs, and the load to wait
        for while its replica is still loading (a load of a replica the node already runs just waits)."""
        replica = self.fleet.replicas[record.replica_id]
        node = self.fleet.nodes[replica.node_id]
        load = None
        if replica.state == "loading":
            load = LoadReplica(model=entry, gpu_indexes=list(replica.devices), replica_id=replica.id, tier=source)
        return Placed(
            lease_id=record.lease_id,
            node_id=node.id,
            replica_id=replica.id,
            gpu_indexes=list(replica.devices),
            gpu_type=node.device(replica.devices[0]).type_name,
            zone=node.zone,
            capacity=node.capacity,
            tier=tier,
            load=load,
            usd_per_1m_prompt=entry.usd_per_1m_prompt,
            usd_per_1m_completion=entry.usd_per_1m_completion,
        )

    def liveness(self, node_id: str) -> NodeLiveness:
        """Evidence about a node whose step timed out (liveness.py): is it gone, or merely slow?"""
        return node_liveness(self.store.engine, node_id)

    # --- state from the store --------------------------------------------------------------

    def sync(self, force: bool = False) -> None:
        """Fold the nodes' latest reports into the fleet (at most every `sync_every_s` unless forced)."""
        now = self.clock()
        with self._lock:
            if not force and now - self._synced_at < self.sync_every_s:
                return
            self._synced_at = now
            self._joining = self.store.node_admission.joining()
            for node_id in self.store.fleet.mark_lost_after(self.node_lost_after_s):
                log.warning("node %s is lost: no heartbeat for %.0fs", node_id, self.node_lost_after_s)
            for model in self.store.models.list():
                if model.entry.provider == "self-hosted":
                    self.fleet.add_model(model_spec(model.entry))
                self.policies[model.entry.name] = model.policy
            for tenant in self.store.tenants.list():  # trust boundaries and GPU quotas, as admins set them
                self.fleet.add_tenant(PoolTenant(tenant.name, tenant.trust.value, tenant.gpu_quota))
            views = [view for view in self.store.fleet.list() if view.status not in UNADMITTED]
            for node_id in set(self.fleet.nodes) - {view.node_id for view in views}:
                self._forget_node(node_id)
            # A claim a peer copy found false is not believed for the dispute's hold (store/peers.py), whatever
            # the node's heartbeats say: neither its disk tier nor its datacenter's counts on it.
            self._disputed = self.store.peers.disputed()
            records = {r.replica_id: r for r in self.store.reservations.list()}
            for view in views:
                self._sync_node(view, now, records)
            self.fleet.bandwidth.observe(
                self.store.peers.samples_after(self.fleet.bandwidth.last_id), self.fleet, self.config
            )
            for replica_id, (at, _) in list(self._gone.items()):
                if now - at > GONE_MEMORY_S:
                    del self._gone[replica_id]
                    if replica_id not in self.fleet.replicas:  # never listed again: its record goes too
                        self.store.reservations.release(replica_id)
            self._sync_other_pools(now, records.values())
            self._drop_released_elsewhere(now)
            if not self._restored:
                self._restored = True
                self._unclaimed = {
                    record.lease_id: (record, now)
                    for record in self.store.leases.list()
                    if record.pool_id == self.pool_id
                }
            if self._unclaimed:
                self._claim_restored_leases(now)

    def _drop_released_elsewhere(self, now: float) -> None:
        """Leases this pool granted whose rows someone else deleted: the reconciler, for a task whose workflow
        ended in Temporal without releasing them (terminated, timed out, failed). Their load goes, so their
        replica serves others and may go idle, rather than being held until the pool restarts."""
        held = self.store.leases.ids_of_pool(self.pool_id)
        for lease_id in [lease_id for lease_id in self._leases if lease_id not in held]:
            replica_id = self._leases[lease_id].booking.replica_id
            self._drop_lease(lease_id)
            log.warning("lease %s was released outside the pool (its task ended): its load is dropped", lease_id)
            replica = self.fleet.replicas.get(replica_id)
            if replica is not None and replica.active_leases == 0:
                self.idle_since[replica_id] = now

    def _sync_other_pools(self, now: float, records: Iterable[Reservation]) -> None:
        """What the pools of other control-plane replicas did since the last sync: the replicas they started
        that no node reports yet (so this pool does not place on their GPUs), and their leases' load.
        `records`: every pool's reservations, as this sync read them."""
        started_at = datetime.now(UTC)
        for r in records:
            if (
                r.pool_id == self.pool_id
                or r.replica_id in self.fleet.replicas
                or r.replica_id in self._gone
                or r.reported_at is not None  # its node listed it: it holds memory only while still listed
                or r.node_id not in self.fleet.nodes
                or r.model not in self.fleet.models
            ):
                continue
            age = (started_at - r.created_at).total_seconds() if r.created_at else 0.0
            if age >= UNREPORTED_LOAD_GRACE_S:
                continue
            try:  # held as "draining": its memory counts, placement never leases it, nor caps the model by it
                self.fleet.add_replica(
                    r.model, r.node_id, r.gpu_indexes, state="draining", tenant=r.owner, replica_id=r.replica_id
                )
            except (StaleDecision, ValueError, KeyError) as exc:
                log.warning("another pool's replica %s does not fit this pool's view: %s", r.replica_id, exc)
                continue
            self._others_loading.add(r.replica_id)
            self._unreported[r.replica_id] = now - age
            self.idle_since.setdefault(r.replica_id, now)
        foreign = self.store.leases.load_of_other_pools(self.pool_id)
        for replica_id in set(foreign) | set(self._foreign):
            replica = self.fleet.replicas.get(replica_id)
            if replica is None:
                continue
            leases, tokens = foreign.get(replica_id, (0, 0))
            before_leases, before_tokens = self._foreign.get(replica_id, (0, 0))
            self.fleet.set_load(
                replica_id,
                active_leases=max(replica.active_leases + leases - before_leases, 0),
                outstanding_tokens=max(replica.outstanding_tokens + tokens - before_tokens, 0),
            )
            if replica.active_leases:
                self.idle_since.pop(replica_id, None)
            else:
                self.idle_since.setdefault(replica_id, now)
        self._foreign = {rid: load for rid, load in foreign.items() if rid in self.fleet.replicas}

    def _sync_node(self, view: NodeView, now: float, records: dict[str, Reservation]) -> None:
        fleet = self.fleet
        if view.node_id not in fleet.nodes:
            fleet.add_node(node_from_view(view))
        node = fleet.nodes[view.node_id]
        if node.labels != view.labels:  # an operator set its trust labels (the node's own are not in the view)
            fleet.set_labels(node.id, view.labels)
        healthy = view.status in ("healthy", "draining")
        if node.healthy != healthy:
            fleet.set_health(node.id, healthy)
        if node.draining != (view.status == "draining"):
            fleet.set_draining(node.id, view.status == "draining")
        cached = {w.model for w in view.cached_weights if (node.id, w.model) not in self._disputed}
        for model in list(fleet.cached):
            if node.id in fleet.cached[model] and model not in cached:
                fleet.evict_weights(node.id, model)
        for model in cached:
            fleet.cache_weights(node.id, model)
        reported = {r.replica_id: r for r in view.replicas}
        claims: dict[str, Replica] = {}
        for replica in [r for r in fleet.replicas.values() if r.node_id == node.id]:
            if replica.id.startswith(CLAIM_PREFIX):
                claims[replica.id] = replica
                continue
            report = reported.pop(replica.id, None)
            if report is not None:
                self._unreported.pop(replica.id, None)
                if replica.id in self._others_loading:  # another pool's new replica, now the node's own word
                    self._others_loading.discard(replica.id)
                    fleet.set_replica_state(replica.id, report.state)
                elif _STATE_ORDER[report.state] > _STATE_ORDER[replica.state] and replica.id not in self._unloading:
                    # Only forward (loading → warm → draining): a report sent before the pool saw the
                    # replica serve must not turn it back into a loading one.
                    fleet.set_replica_state(replica.id, report.state)
                    if report.state == "warm" and replica.active_leases == 0:
                        self.idle_since[replica.id] = now  # idle from when it could first serve
                continue
            placed_at = self._unreported.get(replica.id)
            if view.status != "lost" and placed_at is not None and now - placed_at < UNREPORTED_LOAD_GRACE_S:
                continue  # its load has not reached the node yet
            # A lost node that comes back lists what it still runs: the record stays, so that is served again.
            self._forget_replica(replica.id, keep_record=view.status == "lost")
        news = [r for r in reported.values() if self._listed_again(view, r.replica_id)]
        self._take_reports(view, news, claims, records, now)
        if view.status == "lost":
            for record in self.store.leases.release_node(node.id):
                self._drop_lease(record.lease_id)

    def _listed_again(self, view: NodeView, replica_id: str) -> bool:
        """Whether a replica the node lists is news to the pool: not one reported gone, unless the node still lists
        it well after (then it runs it)."""
        if replica_id not in self._gone:
            return True
        if not _listed_since(view, self._gone[replica_id][1]):
            return False
        del self._gone[replica_id]
        log.info(
            "node %s still runs replica %s, listed %.0fs or more after it was reported gone: serving it again",
            view.node_id,
            replica_id,
            GONE_CONFIRM_S,
        )
        return True

    def _take_reports(
        self,
        view: NodeView,
        reports: list[ReplicaView],
        claims: dict[str, Replica],
        records: dict[str, Reservation],
        now: float,
    ) -> None:
        """Replicas a node lists that the fleet does not hold yet: served from when a pool's record proves them,
        else held as its claims (`claims`: those held since the last sync, by claim id)."""
        fleet, node_id = self.fleet, view.node_id
        proven: list[tuple[ReplicaView, Reservation]] = []
        unproven: dict[str, ReplicaView] = {}
        for report in reports:
            if report.model not in fleet.models:
                continue  # a model taken out of the catalogue: it serves nothing new and will be reaped
            record = records.get(report.replica_id)
            if record is not None and _recorded(record, node_id, report):
                proven.append((report, record))
            else:
                unproven[f"{CLAIM_PREFIX}{node_id}/{report.replica_id}"] = report
        for claim_id, held in claims.items():  # claims gone, changed or proven now free their memory first
            still = unproven.get(claim_id)
            if still is None or held.model != still.model or sorted(held.devices) != sorted(still.gpu_indexes):
                fleet.unload(claim_id)
            else:
                del unproven[claim_id]  # held as it was
        for report, record in proven:
            try:
                fleet.add_replica(
                    report.model,
                    node_id,
                    tuple(report.gpu_indexes),
                    state=report.state,
                    tenant=record.owner,  # an isolated tenant's replica serves it alone, after a restart too
                    replica_id=report.replica_id,
                )
            except (StaleDecision, ValueError, KeyError) as exc:
                log.warning(
                    "node %s reports replica %s that does not fit the fleet: %s", node_id, report.replica_id, exc
                )
                continue
            self.idle_since.setdefault(report.replica_id, now)
        for claim_id, report in unproven.items():
            # The node's word alone: its GPUs' memory is held (a node knows what runs on them), as a draining
            # replica, which no lease, cap or scaling decision counts.
            if claim_id not in claims:
                log.warning(
                    "node %s claims replica %s of %s on GPUs %s that no pool started: claimed, unproven; its memory"
                    " is held and it gets no lease",
                    node_id,
                    report.replica_id,
                    report.model,
                    report.gpu_indexes,
                )
            try:
                fleet.add_replica(
                    report.model, node_id, tuple(report.gpu_indexes), state="draining", replica_id=claim_id
                )
            except (StaleDecision, ValueError, KeyError) as exc:
                log.warning(
                    "node %s claims replica %s that does not fit the fleet: %s", node_id, report.replica_id, exc
                )

    def claimed(self) -> list[tuple[str, str]]:
        """(node, replica id) of every replica a node reports that no pool started: shown, never leased."""
        with self._lock:
            return sorted(
                (r.node_id, r.id.removeprefix(f"{CLAIM_PREFIX}{r.node_id}/"))
                for r in self.fleet.replicas.values()
                if r.id.startswith(CLAIM_PREFIX)
            )

    def _forget_node(self, node_id: str) -> None:
        """A node revoked or removed is no part of the fleet any more (one pending approval never was): as for a
        lost node, its leases are released in the store and here (their steps were told to move), then its
        replicas and the node itself leave the in-memory fleet, so nothing is placed there again."""
        for record in self.store.leases.release_node(node_id):
            self._drop_lease(record.lease_id)
        for lease_id in [lease_id for lease_id, lease in self._leases.items() if lease.record.node_id == node_id]:
            self._drop_lease(lease_id)  # removed from the store already, with the node's other rows
        for replica_id in [r.id for r in self.fleet.replicas.values() if r.node_id == node_id]:
            self._forget_replica(replica_id)
        self.fleet.remove_node(node_id)
        log.warning("node %s left the fleet (revoked or removed): its leases are released", node_id)

    def _forget_replica(self, replica_id: str, *, keep_record: bool = False) -> None:
        """Drop a replica from the fleet; its record (the reservation) goes too unless it may still run
        (`keep_record`: its node went silent, or a step saw it fail), so the node may list it back."""
        self.fleet.unload(replica_id)
        if not keep_record:
            self.store.reservations.release(replica_id)
        self._foreign.pop(replica_id, None)
        self._others_loading.discard(replica_id)
        self._unreported.pop(replica_id, None)
        self._unloading.discard(replica_id)
        self.idle_since.pop(replica_id, None)
        self._intents.ended(replica_id, self.clock())

    def _drop_lease(self, lease_id: str) -> None:
        self._unclaimed.pop(lease_id, None)
        lease = self._leases.pop(lease_id, None)
        if lease is not None:
            self._by_step.pop((lease.record.task_id, lease.record.step), None)
            self.fleet.release(lease.booking)

    def _claim_restored_leases(self, now: float) -> None:
        """After a restart: the leases still held count as load again, once a node reports their replica.

        A lease on a replica no node reports yet (its load had only just been sent when the pool
        stopped) is kept until the unreported-load grace passes: its step is still running, and a node
        may book a step only while the store says it holds a lease for the task.
        """
        for lease_id, (record, found_at) in list(self._unclaimed.items()):
            replica = self.fleet.replicas.get(record.replica_id)
            entry = self.catalogue.get(record.model)
            if replica is None or entry is None:
                if now - found_at >= UNREPORTED_LOAD_GRACE_S:
                    del self._unclaimed[lease_id]
                    self.store.leases.release(lease_id)
                continue
            del self._unclaimed[lease_id]
            self.fleet.set_load(
                replica.id,
                outstanding_tokens=replica.outstanding_tokens + record.tokens,
                active_leases=replica.active_leases + 1,
            )
            booking = Booking(record.lease_id, replica.id, record.tokens, record.created_replica)
            # The tier it was placed from is not kept; where the replica stands now is what a step sees.
            grant = self._lease_grant(record, entry, "warm" if replica.state == "warm" else "loading", "origin")
            self._leases[record.lease_id] = _Lease(record, booking, grant)
            self._by_step[(record.task_id, record.step)] = record.lease_id
            self.idle_since.pop(replica.id, None)

    def _drop_unclaimed_for_step(self, task_id: str, step: int) -> None:
        """A step asking again for a lease the restarted pool could not count yet never received it (its
        workflow replayed the acquire): the old one goes, so the step's new lease is the one recorded."""
        for lease_id, (record, _) in list(self._unclaimed.items()):
            if (record.task_id, record.step) == (task_id, step):
                del self._unclaimed[lease_id]
                self.store.leases.release(lease_id)

    # --- for the scaler --------------------------------------------------------------------

    def plan_scaling(self) -> list[ScaleUp | ScaleDown]:
        """The scaler's plan for the fleet as it is now (see orchestrator.pool.scaler)."""
        now = self.clock()
        with self._lock:
            self.sync()
            demand = {model: ModelDemand(waiting=n) for model, n in self.queue.demand(now).items()}
            # A step that stopped asking (cancelled, failed) left the queue: its slot wait goes with it.
            self._slot_waits = {task: since for task, since in self._slot_waits.items() if task in self.queue}
            if self.baseline is not None:  # an HPA per model, which learns nothing
                return plan_scaling(self.fleet, self.baseline.scaling(self.fleet, demand), self.idle_since, now, demand)
            return plan_scaling(self.fleet, self.policies, self.idle_since, now, demand, self.foresight)

    def foresight_views(self) -> dict[str, ModelForesight]:
        """What the scaler learned and pre-warmed per model, in wall-clock time, for the API to show."""
        with self._lock:
            return foresight_views(self.foresight, self.clock(), datetime.now(UTC))

    def start_replica(self, model: str, prewarm: str | None = None) -> LoadOnNode | None:
        """Place a replica for the scaler (batch class: spot first) and count it as loading; None if nothing fits.
        `prewarm` is why, when it is started for steps that have not asked yet (recorded as a pre-warm)."""
        entry = self.catalogue.get(model)
        if entry is None or entry.provider != "self-hosted":
            return None
        with self._lock:
            self.sync()
            self.fleet.add_model(model_spec(entry))
            traffic, now = self.foresight.traffic, self.clock()
            prompt = traffic.prompt_tokens(model, now) if traffic.serves_interactive(model, now) else None
            if self.baseline is not None:
                decision = self.baseline.new_replica(self.fleet, model, prompt)
            else:
                decision = place_scaler_replica(self.fleet, model, self.config, prompt)
            chosen = decision.chosen
            if chosen is None:
                return None  # no room for another replica now
            booking = self.fleet.apply(decision, 1)
            replica = self.fleet.replicas[booking.replica_id]
            if not self._reserve(replica):
                self.fleet.unload(replica.id)
                self.sync(force=True)
                return None  # another control-plane replica took those GPUs; the next tick plans again
            # Undo the booking's load but keep the replica: nobody holds a lease on it yet.
            self.fleet.set_load(replica.id, outstanding_tokens=0, active_leases=0)
            now = self.clock()
            self._unreported[replica.id] = now
            self.idle_since[replica.id] = now
            if prewarm is not None:
                self._intents.started(replica.id, model, now, prewarm)
        source: FetchSource = "datacenter" if chosen.candidate.tier == "datacenter" else "origin"
        return LoadOnNode(
            node_id=replica.node_id,
            request=LoadReplica(model=entry, gpu_indexes=list(replica.devices), replica_id=replica.id, tier=source),
        )

    def begin_unload(self, replica_id: str) -> bool:
        """Take an idle replica out of placement before its node is told to stop it; False if it is busy."""
        with self._lock:
            replica = self.fleet.replicas.get(replica_id)
            if replica is None or replica.active_leases or replica.state != "warm" or replica_id in self._unloading:
                return False
            self.fleet.set_replica_state(replica_id, "draining")
            self._unloading.add(replica_id)
            return True


_STATE_ORDER = {"loading": 0, "warm": 1, "draining": 2}


def _listed_since(view: NodeView, gone_at: datetime) -> bool:
    """Whether the node's latest heartbeat came GONE_CONFIRM_S or more after `gone_at` (so its list is fresh)."""
    beat = view.last_heartbeat_at
    if beat is None:
        return False
    beat = beat if beat.tzinfo else beat.replace(tzinfo=UTC)
    return beat - gone_at >= timedelta(seconds=GONE_CONFIRM_S)


def _recorded(record: Reservation, node_id: str, report: ReplicaView) -> bool:
    """Whether a pool's record of a load is the replica the node reports: same node, model and GPUs."""
    return (
        record.node_id == node_id
        and record.model == report.model
        and sorted(record.gpu_indexes) == sorted(report.gpu_indexes)
    )


def _placement_request(req: LeaseRequest, max_replicas: int, traffic_prompt_tokens: int = 0) -> PlacementRequest:
    return PlacementRequest(
        model=req.model,
        tokens=req.prompt_tokens + req.tokens,
        prompt_tokens=req.prompt_tokens,
        tenant=req.tenant,
        priority=req.service_class,
        exclude_nodes=frozenset(req.exclude_nodes),
        exclude_spot_zones=frozenset(req.avoid_spot_zones),
        previous_replica=req.previous_replica,
        max_replicas=max_replicas,
        objectives=req.objectives,
        traffic_prompt_tokens=traffic_prompt_tokens,
    )
