"""The in-memory fleet: nodes, GPU devices, models, replicas, weight caches, tenants.

This is the state `place()` reads and `FleetState.apply()` / `release()` change. It is fed by
the store and the node agents' heartbeats (elsewhere); it does no I/O itself. Every mutation
keeps the indexes placement relies on up to date at once, so a placement booked here counts
as load for the very next decision (no thundering herd), and no decision scans the fleet.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections import Counter
from dataclasses import dataclass, field
from typing import Literal

from ..weights_transfer import DISK_BYTES_PER_S, GIB
from .bandwidth import LearnedBandwidth
from .capacity import DeviceFree, FreeCapacityIndex
from .decision import Decision
from .spare import SpareReplicas, SpareSlot

CapacityClass = Literal["spot", "on-demand"]
Trust = Literal["shared", "isolated", "dedicated"]
ReplicaState = Literal["loading", "warm", "draining"]

# Memory comparisons allow this much float error (GiB): 1 MiB, far below any real allocation.
EPSILON_GIB = 1 / 1024


@dataclass
class Device:
    """One schedulable GPU device: a whole GPU, or one MIG instance with its own memory."""

    index: int
    uuid: str
    type_name: str  # the physical GPU type, e.g. "H100-80GB"; MIG instances keep their parent's
    memory_gib: float
    speed: float = 1.0  # relative to an H100 = 1.0
    mig_profile: str | None = None  # e.g. "3g.40gb"; MIG instances never join a tensor-parallel gang
    reserved_gib: float = 0.0
    owner: str | None = None  # the isolated/dedicated tenant whose replica holds it, if any
    replicas: int = 0
    # The replicas on it, by id: co-residents read the same memory, so each one generating slows the others.
    residents: dict[str, str] = field(default_factory=dict, repr=False, compare=False)  # replica id → model

    @property
    def free_gib(self) -> float:
        return self.memory_gib - self.reserved_gib


@dataclass
class Node:
    id: str
    datacenter: str
    zone: str
    capacity: CapacityClass
    usd_per_hour: float
    devices: list[Device]
    disk_gib_per_s: float = DISK_BYTES_PER_S / GIB  # local NVMe read, the disk tier's bandwidth
    healthy: bool = True
    draining: bool = False
    labels: dict[str, str] = field(default_factory=dict)
    preemption_risk: float | None = None  # measured for this node; None → the config's default for spot
    engines: frozenset[str] | None = None  # the engines it runs replicas with; None: not stated, any
    _by_index: dict[int, Device] = field(default_factory=dict, repr=False, compare=False)
    _types: frozenset[str] | None = field(default=None, repr=False, compare=False)

    @property
    def type_names(self) -> frozenset[str]:
        """The GPU types it has (one, but for mixed nodes): a node's hardware does not change while it is in the fleet."""
        if self._types is None:
            self._types = frozenset(d.type_name for d in self.devices)
        return self._types

    @property
    def dedicated_to(self) -> str | None:
        """The tenant an operator dedicated the node to: the store's view carries a trust label only as an operator
        set it (store/fleet.py `labels_of`), never as the node registered it."""
        return self.labels.get("dedicated")

    @property
    def schedulable(self) -> bool:
        return self.healthy and not self.draining

    def device(self, index: int) -> Device:
        if len(self._by_index) != len(self.devices):
            self._by_index = {d.index: d for d in self.devices}
        try:
            return self._by_index[index]
        except KeyError:
            raise KeyError(f"node {self.id} has no device {index}") from None


@dataclass(frozen=True)
class ModelSpec:
    """A catalogue entry as placement sees it."""

    name: str
    weights_gib: float
    kv_headroom_gib: float
    tensor_parallel: tuple[int, ...] = (1,)  # allowed degrees
    usd_per_1m_tokens: float = 0.0
    tokens_per_s: float = 2500.0  # one replica's batch throughput on a speed-1.0 GPU
    concurrency: int = 32  # leases one replica serves at once (continuous batching)
    engine: str = "simulated"  # a new replica goes only to a node that runs it

    @property
    def memory_gib(self) -> float:
        return self.weights_gib + self.kv_headroom_gib


@dataclass
class Replica:
    id: str
    model: str
    node_id: str
    devices: tuple[int, ...]
    per_device_gib: float
    state: ReplicaState
    concurrency: int
    tenant: str | None = None  # who started it
    isolated: bool = False  # holds its devices for `tenant` alone
    outstanding_tokens: int = 0
    active_leases: int = 0
    load_s: float = 0.0  # the load estimate when it was placed; a loading replica's queue starts after it
    tokens_per_s: float = 1.0  # batch throughput: the catalogue's rate on its slowest device
    # Where it sits in FleetState.spare while it has a free slot (so removal finds the same list).
    spare_slot: SpareSlot | None = field(default=None, repr=False, compare=False)

    @property
    def queue_s(self) -> float:
        """Seconds of queue: outstanding reserved tokens over throughput (tokens, not requests)."""
        return self.outstanding_tokens / self.tokens_per_s

    @property
    def boundary(self) -> str | None:
        return self.tenant if self.isolated else None

    @property
    def has_slot(self) -> bool:
        return self.state != "draining" and self.active_leases < self.concurrency


@dataclass(frozen=True)
class Tenant:
    id: str
    trust: Trust = "shared"
    gpu_quota: int | None = None  # devices its replicas may hold at once; None = unlimited


@dataclass(frozen=True)
class Booking:
    """What `apply` booked, so `release` can undo exactly that."""

    lease_id: str
    replica_id: str
    tokens: int
    created_replica: bool


class StaleDecision(ValueError):
    """The fleet changed between place() and apply(): the decision no longer fits; place again."""


class FleetState:
    """Nodes, models, replicas and caches, with the indexes placement reads."""

    def __init__(self, replica_prefix: str = "r-") -> None:
        # New replica ids are prefix + counter; a pool process gives its own prefix so ids from
        # an earlier run (still reported by the nodes) never collide with new ones.
        self.replica_prefix = replica_prefix
        self.nodes: dict[str, Node] = {}
        self.models: dict[str, ModelSpec] = {}
        self.tenants: dict[str, Tenant] = {}
        self.replicas: dict[str, Replica] = {}
        self.replicas_by_model: dict[str, dict[str, None]] = {}  # insertion-ordered set; callers sort
        # The replicas with a free slot, by (model, boundary owner, capacity class) and class: a decision reads
        # each class's first few, never all of them, and still finds the best (spare.py).
        self.spare = SpareReplicas()
        # (model, boundary owner) → [replicas not draining, loading replicas with no free slot]:
        # the waiting path tells busy from cold start from these, never by scanning replicas.
        self.replica_counts: dict[tuple[str, str | None], list[int]] = {}
        # model → its replicas not draining (what the policy's max_replicas caps), and (model, boundary
        # owner) → their free lease slots (how many waiting steps can be served at once): both O(1) to read.
        self.live_replicas: Counter[str] = Counter()
        self.free_slots: Counter[tuple[str, str | None]] = Counter()
        self.cached: dict[str, set[str]] = {}  # model → node ids with its weights on local disk
        self.cached_sorted: dict[str, list[str]] = {}
        self.weights_in_dc: dict[str, Counter[str]] = {}  # model → datacenter → nodes caching it
        self.dedicated_nodes: dict[str, list[str]] = {}  # tenant → its labelled node ids, sorted
        self.tenant_devices: Counter[str] = Counter()  # tenant → devices its replicas hold
        self.shapes: Counter[tuple[tuple[str, float, bool], ...]] = Counter()  # node hardware shapes
        self.free_index = FreeCapacityIndex()
        # The same, of devices no replica uses: all an isolated tenant may take besides its own (`isolated_nodes`).
        self.empty_index = FreeCapacityIndex()
        self.isolated_nodes: dict[str, Counter[str]] = {}  # tenant → nodes with its isolated replicas → how many
        # Tenant → the devices it may take on its own nodes (its own and the unused ones), indexed as the others:
        # a tenant isolated across thousands of nodes finds the best fits there without reading them all.
        self.own_index: dict[str, FreeCapacityIndex] = {}
        self._owners_indexed: dict[str, set[str]] = {}  # node → tenants whose own index lists it
        self.type_speed: dict[str, float] = {}  # GPU type → the highest speed of a device of that type
        self.fastest_disk_gib_per_s = 0.0  # the highest disk read rate any node registered
        # Transfer rates learned from what nodes measured (the scorers' load times); priors until then.
        self.bandwidth = LearnedBandwidth()
        self._next_replica = 0
        self._next_lease = 0

    # --- inventory -------------------------------------------------------------------------

    def add_node(self, node: Node) -> None:
        if node.id in self.nodes:
            raise ValueError(f"node {node.id!r} is already in the fleet")
        self.nodes[node.id] = node
        self.shapes[_shape(node)] += 1
        # Only ever raised (a node that leaves keeps them): bounds that stay true, for `scorers.new_replica_floor`.
        for d in node.devices:
            self.type_speed[d.type_name] = max(self.type_speed.get(d.type_name, 0.0), d.speed)
        self.fastest_disk_gib_per_s = max(self.fastest_disk_gib_per_s, node.disk_gib_per_s)
        self._index_dedication(node)
        self._reindex(node)

    def remove_node(self, node_id: str) -> None:
        """Take a node out of the fleet (revoked, or forgotten by the store): its replicas come off its GPUs
        first, so no device or tenant keeps memory or quota booked on hardware that is gone; its cached
        weights leave the locality indexes; nothing of it is left to place on, nor to cap the fleet's shapes."""
        node = self.nodes[node_id]
        for replica_id in [r.id for r in self.replicas.values() if r.node_id == node_id]:
            self.unload(replica_id)
        for model in [m for m, holders in self.cached.items() if node_id in holders]:
            self.evict_weights(node_id, model)
        self.free_index.update(node_id, node.datacenter, node.capacity, None)
        self.empty_index.update(node_id, node.datacenter, node.capacity, None)
        shape = _shape(node)
        self.shapes[shape] -= 1
        if self.shapes[shape] <= 0:
            del self.shapes[shape]
        self._unindex_dedication(node)
        del self.nodes[node_id]

    def set_labels(self, node_id: str, labels: dict[str, str]) -> None:
        """An operator changed the node's labels, and with them whom it is dedicated to: from the next decision on,
        only that tenant's steps go there (what runs there already finishes)."""
        node = self.nodes[node_id]
        self._unindex_dedication(node)
        node.labels = dict(labels)
        self._index_dedication(node)
        self._reindex(node)

    def _index_dedication(self, node: Node) -> None:
        if node.dedicated_to:
            insort(self.dedicated_nodes.setdefault(node.dedicated_to, []), node.id)

    def _unindex_dedication(self, node: Node) -> None:
        if node.dedicated_to:
            owned = self.dedicated_nodes[node.dedicated_to]
            owned.remove(node.id)
            if not owned:
                del self.dedicated_nodes[node.dedicated_to]

    def add_model(self, model: ModelSpec) -> None:
        self.models[model.name] = model

    def add_tenant(self, tenant: Tenant) -> None:
        self.tenants[tenant.id] = tenant

    def trust_of(self, tenant: str | None) -> Trust:
        t = self.tenants.get(tenant or "")
        return t.trust if t else "shared"

    def set_health(self, node_id: str, healthy: bool) -> None:
        self.nodes[node_id].healthy = healthy
        self._reindex(self.nodes[node_id])

    def set_draining(self, node_id: str, draining: bool) -> None:
        self.nodes[node_id].draining = draining
        self._reindex(self.nodes[node_id])

    def cache_weights(self, node_id: str, model: str) -> None:
        nodes = self.cached.setdefault(model, set())
        if node_id in nodes:
            return
        nodes.add(node_id)
        insort(self.cached_sorted.setdefault(model, []), node_id)  # not a re-sort: a popular model is in 10⁵ caches
        self.weights_in_dc.setdefault(model, Counter())[self.nodes[node_id].datacenter] += 1

    def evict_weights(self, node_id: str, model: str) -> None:
        nodes = self.cached.get(model, set())
        if node_id not in nodes:
            return
        nodes.discard(node_id)
        in_order = self.cached_sorted[model]
        del in_order[bisect_left(in_order, node_id)]
        dcs = self.weights_in_dc[model]
        dcs[self.nodes[node_id].datacenter] -= 1
        if dcs[self.nodes[node_id].datacenter] <= 0:
            del dcs[self.nodes[node_id].datacenter]

    def caching_in(self, model: str, datacenter: str) -> int:
        """How many nodes of `datacenter` have `model`'s weights on local disk."""
        counts = self.weights_in_dc.get(model)
        return counts[datacenter] if counts is not None else 0

    # --- replicas --------------------------------------------------------------------------

    def add_replica(
        self,
        model: str,
        node_id: str,
        devices: tuple[int, ...],
        *,
        state: ReplicaState = "warm",
        tenant: str | None = None,
        load_s: float = 0.0,
        replica_id: str | None = None,
    ) -> Replica:
        """Put a replica on devices (a node agent reports one, or apply() starts one).

        `replica_id` is the one a node reported; a replica placed here gets a fresh id.
        """
        spec = self.models[model]
        node = self.nodes[node_id]
        if len(set(devices)) != len(devices) or not devices:
            raise ValueError(f"replica devices must be distinct and non-empty, got {devices}")
        per_device = spec.memory_gib / len(devices)
        isolated = self.trust_of(tenant) != "shared"
        for i in devices:
            dev = node.device(i)
            if dev.free_gib + EPSILON_GIB < per_device:
                raise StaleDecision(
                    f"{node_id} device {i} has {dev.free_gib:.1f} GiB free, {model} needs {per_device:.1f}"
                )
            if dev.replicas and dev.owner != (tenant if isolated else None):
                raise StaleDecision(f"{node_id} device {i} is held across a tenant boundary")
        if replica_id is None:
            self._next_replica += 1
            replica_id = f"{self.replica_prefix}{self._next_replica}"
        if replica_id in self.replicas:
            raise ValueError(f"replica {replica_id!r} is already in the fleet")
        replica = Replica(
            id=replica_id,
            model=model,
            node_id=node_id,
            devices=tuple(devices),
            per_device_gib=per_device,
            state=state,
            concurrency=spec.concurrency,
            tenant=tenant,
            isolated=isolated,
            load_s=load_s,
            tokens_per_s=spec.tokens_per_s * min(node.device(i).speed for i in devices),
        )
        for i in devices:
            dev = node.device(i)
            dev.reserved_gib += per_device
            dev.replicas += 1
            dev.residents[replica.id] = model
            dev.owner = tenant if isolated else None
        if tenant:
            self.tenant_devices[tenant] += len(devices)
        if tenant and isolated:
            self.isolated_nodes.setdefault(tenant, Counter())[node_id] += 1
        self.replicas[replica.id] = replica
        self.replicas_by_model.setdefault(model, {})[replica.id] = None
        self._index_replica(replica)
        self._reindex(node)
        return replica

    def set_load(
        self, replica_id: str, *, outstanding_tokens: int | None = None, active_leases: int | None = None
    ) -> None:
        """A heartbeat's measured load for a replica (the only way to change it outside apply/release)."""
        replica = self.replicas[replica_id]
        was_busy = replica.active_leases > 0
        self._unindex_replica(replica)
        if outstanding_tokens is not None:
            replica.outstanding_tokens = outstanding_tokens
        if active_leases is not None:
            replica.active_leases = active_leases
        self._index_replica(replica)
        if was_busy != (replica.active_leases > 0):
            self._reindex_neighbours(replica)

    def sharing(self, replica: Replica) -> int:
        """Replicas generating on the replica's busiest GPU, itself counted: each of them runs at that share of
        the GPU's speed (co-residents read their weights through the same memory)."""
        node = self.nodes[replica.node_id]
        busy = 0
        for i in replica.devices:
            others = node.device(i).residents
            busy = max(busy, sum(1 for r in others if r != replica.id and self.replicas[r].active_leases > 0))
        return 1 + busy

    def _reindex_neighbours(self, replica: Replica) -> None:
        """A replica began or stopped generating: the others on its GPUs change class (`sharing`)."""
        node = self.nodes[replica.node_id]
        neighbours = {r for i in replica.devices for r in node.device(i).residents if r != replica.id}
        for other in sorted(neighbours):
            neighbour = self.replicas[other]
            self._unindex_replica(neighbour)
            self._index_replica(neighbour)

    def set_replica_state(self, replica_id: str, state: ReplicaState) -> None:
        replica = self.replicas[replica_id]
        self._unindex_replica(replica)
        replica.state = state
        self._index_replica(replica)

    def mark_warm(self, replica_id: str) -> None:
        self.set_replica_state(replica_id, "warm")

    def unload(self, replica_id: str) -> None:
        """Take a replica off its GPUs (scale-down, failed load); its weights stay on disk."""
        replica = self.replicas[replica_id]
        if replica.active_leases > 0:  # a busy one taken away (its node lost): its neighbours speed up
            replica.active_leases, busy_leases = 0, replica.active_leases
            self._reindex_neighbours(replica)
            replica.active_leases = busy_leases
        del self.replicas[replica_id]
        self._unindex_replica(replica)
        del self.replicas_by_model[replica.model][replica_id]
        node = self.nodes[replica.node_id]
        for i in replica.devices:
            dev = node.device(i)
            dev.reserved_gib = max(dev.reserved_gib - replica.per_device_gib, 0.0)
            dev.replicas -= 1
            dev.residents.pop(replica_id, None)
            if dev.replicas == 0:
                dev.reserved_gib = 0.0  # drop accumulated float error with the last tenant
                dev.owner = None
        if replica.tenant:
            self.tenant_devices[replica.tenant] -= len(replica.devices)
        if replica.tenant and replica.isolated:
            held = self.isolated_nodes[replica.tenant]
            held[replica.node_id] -= 1
            if held[replica.node_id] <= 0:
                del held[replica.node_id]
        self._reindex(node)

    # --- bookings --------------------------------------------------------------------------

    def apply(self, decision: Decision, tokens: int) -> Booking:
        """Book a placed decision at once: its tokens as load, a new replica's memory as reserved."""
        choice = decision.chosen
        if choice is None:
            raise ValueError(f"nothing to apply: the decision is {decision.outcome} ({decision.reason})")
        cand = choice.candidate
        created = cand.replica_id is None
        if cand.replica_id is None:
            replica = self.add_replica(
                decision.request.model,
                cand.node_id,
                cand.devices,
                state="loading",
                tenant=decision.request.tenant,
                load_s=choice.terms.get("ttft", 0.0),
            )
        else:
            existing = self.replicas.get(cand.replica_id)
            if existing is None or not existing.has_slot:
                raise StaleDecision(f"replica {cand.replica_id} can no longer take a lease")
            replica = existing
        self.set_load(
            replica.id, outstanding_tokens=replica.outstanding_tokens + tokens, active_leases=replica.active_leases + 1
        )
        self._next_lease += 1
        return Booking(f"l-{self._next_lease}", replica.id, tokens, created)

    def release(self, booking: Booking) -> None:
        """Undo a booking: its load goes; a replica it started that never got past loading goes too."""
        replica = self.replicas.get(booking.replica_id)
        if replica is None:
            return  # already unloaded (node lost): nothing left to undo
        self.set_load(
            replica.id,
            outstanding_tokens=max(replica.outstanding_tokens - booking.tokens, 0),
            active_leases=max(replica.active_leases - 1, 0),
        )
        if booking.created_replica and replica.state == "loading" and replica.active_leases == 0:
            self.unload(replica.id)

    # --- index upkeep ----------------------------------------------------------------------

    def _count_replica(self, replica: Replica, sign: int) -> None:
        if replica.state == "draining":
            return
        self.live_replicas[replica.model] += sign
        self.free_slots[(replica.model, replica.boundary)] += sign * max(replica.concurrency - replica.active_leases, 0)
        counts = self.replica_counts.setdefault((replica.model, replica.boundary), [0, 0])
        counts[0] += sign
        if replica.state == "loading" and not replica.has_slot:
            counts[1] += sign

    def _index_replica(self, replica: Replica) -> None:
        self._count_replica(replica, 1)
        if replica.has_slot:
            replica.spare_slot = self._spare_slot(replica)
            self.spare.add(replica.spare_slot)

    def _spare_slot(self, replica: Replica) -> SpareSlot:
        """The replica's class and its wait, computed as the scorers compute them (`spare.py` says why)."""
        node = self.nodes[replica.node_id]
        tier = "warm" if replica.state == "warm" else "loading"
        wait = replica.queue_s / max(replica.concurrency, 1)
        if tier == "loading":
            wait = wait + replica.load_s
        usd_per_hour = node.usd_per_hour * len(replica.devices) / max(len(node.devices), 1)
        speed = min(node.device(i).speed for i in replica.devices)
        risk = node.preemption_risk if node.capacity == "spot" else None
        return SpareSlot(
            (replica.model, replica.boundary, node.capacity),
            (tier, replica.tokens_per_s, replica.concurrency, speed, usd_per_hour, risk, self.sharing(replica)),
            (wait, node.id, replica.devices, replica.id),
        )

    def _unindex_replica(self, replica: Replica) -> None:
        self._count_replica(replica, -1)
        if replica.spare_slot is not None:
            self.spare.remove(replica.spare_slot)
            replica.spare_slot = None

    def _reindex(self, node: Node) -> None:
        devices = empty = None
        if node.schedulable and not node.dedicated_to:
            devices = [DeviceFree(d.type_name, d.free_gib, d.replicas > 0) for d in node.devices]
            empty = [DeviceFree(d.type_name, d.free_gib) for d in node.devices if d.replicas == 0]
        self.free_index.update(node.id, node.datacenter, node.capacity, devices)
        self.empty_index.update(node.id, node.datacenter, node.capacity, empty)
        for tenant in {d.owner for d in node.devices if d.owner is not None} | self._owners_indexed.pop(node.id, set()):
            own = None
            if devices is not None and node.id in self.isolated_nodes.get(tenant, ()):
                own = [
                    DeviceFree(d.type_name, d.free_gib, d.replicas > 0)
                    for d in node.devices
                    if d.replicas == 0 or d.owner == tenant
                ]
                self._owners_indexed.setdefault(node.id, set()).add(tenant)
            self.own_index.setdefault(tenant, FreeCapacityIndex()).update(node.id, node.datacenter, node.capacity, own)


def _shape(node: Node) -> tuple[tuple[str, float, bool], ...]:
    """The hardware a node has, whatever its state: what "could this fleet EVER serve it" reads."""
    return tuple(sorted((d.type_name, d.memory_gib, d.mig_profile is not None) for d in node.devices))
