"""The GPU fleet as the control plane, the node agents and the CLI exchange it.

A node agent sends a `NodeRegistration` once when it starts (what it *is*: place, price,
GPUs) and a `NodeHeartbeat` every few seconds (what it is *doing*: GPU metrics, cached
weights, replicas). The two are separate so that the frequent message stays small and the
registration can be validated once against the GPU catalogue. Everything a node sends is
checked strictly (`extra="forbid"`): a misspelt field from a node agent of another version
must fail loudly at registration, not silently drop a GPU from scheduling.

Reads come back as `NodeView` and `ReplicaView`, which add what only the control plane
knows: the node's status and when it was last heard from.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .._refusal import refused_at
from .catalogue import EngineKind
from .limits import MAX_STORED_INT, NAME_PATTERN, numbers_not_booleans
from .peers import TransferSample

NODE_ID_PATTERN = NAME_PATTERN  # a node id is typed and grepped like an agent name
PLACE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$"  # datacenter and zone names, e.g. "us-east-1a"
NODE_SECRET_HEADER = "X-Berth-Node-Secret"
# A peer server's host as a node names it: a DNS name or an IPv4/IPv6 literal, no scheme, port or path.
PEER_HOST_PATTERN = r"^[A-Za-z0-9.:-]{1,253}$"
UNKNOWN_GPU_TYPE = "unknown"  # what discovery reports for a device not in the GPU type catalogue
# Labels that draw a tenant's or a trust boundary (`dedicated=<tenant>`: the pool places only that tenant's steps
# there). Only an operator sets them (the node's record, `trust_labels`): a node that names one itself is not
# believed, or any admitted machine could make itself a tenant's and be sent that tenant's conversations.
TRUST_LABELS: frozenset[str] = frozenset({"dedicated", "isolated"})
# The node pool a node joined through a pool token (sdk/wire/node_pools.py): an operator's fact like the trust labels,
# shown among its labels only as the token said it. A node's own `pool` label is not shown or read.
POOL_LABEL = "pool"
OPERATOR_LABELS: frozenset[str] = TRUST_LABELS | {POOL_LABEL}

Capacity = Literal["spot", "on-demand"]
ReplicaState = Literal["loading", "warm", "draining"]
NodeStatus = Literal["healthy", "unhealthy", "draining", "lost", "pending", "revoked"]
# Nodes that are not part of the fleet: one waiting for an operator's approval (joined with the cluster
# token) and one whose credential was revoked. Nothing is placed on them, nothing is read from them.
UNADMITTED: frozenset[NodeStatus] = frozenset({"pending", "revoked"})
# A per-node join token lives an hour unless the operator says otherwise: long enough to start the machine
# it is for, short enough that one left in a script or a shell history is dead when it is found. A minute at
# least (a node takes that long to start), a week at most (7 × 86,400 = 604,800 s: shipping a machine to a
# datacenter, never a standing credential).
DEFAULT_ADMIT_TTL_S = 3600
MIN_ADMIT_TTL_S = 60
MAX_ADMIT_TTL_S = 7 * 86_400

_STRICT = ConfigDict(extra="forbid")
# The largest GPU memory a device can report, in MiB: 16 TiB, a hundred times today's largest (H200, 141 GB).
MAX_GPU_MEMORY_MIB = 16 * 1024 * 1024


class MigDeviceDescription(BaseModel):
    """One MIG instance of a GPU; the pool schedules it as a device of its own."""

    model_config = _STRICT

    uuid: str = Field(min_length=1, max_length=128)
    profile: str | None = Field(default=None, max_length=32, description='e.g. "1g.10gb"')
    memory_total_mib: int | None = Field(default=None, ge=0, le=MAX_GPU_MEMORY_MIB)

    _numbers = numbers_not_booleans("memory_total_mib")


class GpuDescription(BaseModel):
    """A GPU as discovery found it (`orchestrator.node.discovery.GpuInfo`, minus the live metrics)."""

    model_config = _STRICT

    index: int = Field(ge=0, le=1023)
    uuid: str | None = Field(default=None, max_length=128)
    type_name: str = Field(
        min_length=1, max_length=64, description='GPU type catalogue key, e.g. "H100-80GB", or "unknown"'
    )
    memory_total_mib: int | None = Field(default=None, ge=0, le=MAX_GPU_MEMORY_MIB)
    mig_mode: bool = False
    mig_devices: list[MigDeviceDescription] = Field(default_factory=list, max_length=7)  # 7 compute slices per GPU

    _numbers = numbers_not_booleans("index", "memory_total_mib")


class NodeSpec(BaseModel):
    """What a node is: where it runs, what it costs, what it holds. Changes only on re-registration."""

    model_config = _STRICT

    node_id: str = Field(pattern=NODE_ID_PATTERN)
    datacenter: str = Field(pattern=PLACE_PATTERN)
    zone: str = Field(pattern=PLACE_PATTERN)
    capacity: Capacity = "on-demand"
    usd_per_hour: float = Field(default=0.0, ge=0, le=10_000, description="the whole node's price")
    labels: dict[Annotated[str, Field(min_length=1, max_length=63)], Annotated[str, Field(max_length=255)]] = Field(
        default_factory=dict,
        max_length=32,
        description='e.g. {"rack": "r7"}; a trust label (dedicated, isolated) or pool here is ignored: only an'
        " operator sets those",
    )
    # Gigabytes (not gigabits) per second: the pool's disk tier divides weight bytes by it.
    disk_bandwidth_gbps: float = Field(default=2.0, gt=0, le=1000, description="local disk read, GB/s")
    gpus: list[GpuDescription] = Field(default_factory=list, max_length=64)
    weights_cache_capacity_bytes: int = Field(default=0, ge=0, le=MAX_STORED_INT)
    engines: list[EngineKind] = Field(
        default_factory=list, max_length=8, description="the engines it runs replicas with; empty: not stated, any"
    )

    _numbers = numbers_not_booleans("usd_per_hour", "disk_bandwidth_gbps", "weights_cache_capacity_bytes")

    @model_validator(mode="after")
    def _distinct_gpu_indexes(self) -> NodeSpec:
        seen: set[int] = set()
        for position, gpu in enumerate(self.gpus):
            if gpu.index in seen:  # the refusal names the second listing: gpus.<position>.index
                raise refused_at(
                    "NodeSpec", ("gpus", position, "index"), f"index {gpu.index} is listed more than once", gpu.index
                )
            seen.add(gpu.index)
        return self


class NodeRegistration(NodeSpec):
    """A node asking to join: its spec and a join token (never stored, never shown): a per-node token from
    `berth nodes admit` lets it in at once, the cluster's token leaves it pending until an operator approves it."""

    join_token: str = Field(min_length=1, max_length=512)

    def spec(self) -> NodeSpec:
        return NodeSpec.model_validate(self.model_dump(exclude={"join_token"}))


class GpuHealth(BaseModel):
    """One GPU's live metrics (`orchestrator.node.discovery.GpuMetrics`)."""

    model_config = _STRICT

    index: int = Field(ge=0, le=1023)
    memory_used_mib: int | None = Field(default=None, ge=0, le=MAX_STORED_INT)
    utilization_pct: int | None = Field(default=None, ge=0, le=100)
    ecc_errors: int | None = Field(default=None, ge=0, le=MAX_STORED_INT)
    healthy: bool = True
    reason: str | None = Field(default=None, max_length=500, description="why it is unhealthy")

    _numbers = numbers_not_booleans("index", "memory_used_mib", "utilization_pct", "ecc_errors")


class CachedModelWeights(BaseModel):
    """A model's weights on the node's local disk (`orchestrator.node.weights_cache.CachedWeights`)."""

    model_config = _STRICT

    model: str = Field(min_length=1, max_length=128)
    size_bytes: int = Field(ge=0, le=MAX_STORED_INT)

    _numbers = numbers_not_booleans("size_bytes")


class ReplicaReport(BaseModel):
    """A model loaded on some of the node's GPUs, as the node reports it."""

    model_config = _STRICT

    replica_id: str = Field(min_length=1, max_length=128, description="the id the pool gave it when it was placed")
    model: str = Field(min_length=1, max_length=128)
    gpu_indexes: list[Annotated[int, Field(ge=0, le=1023)]] = Field(min_length=1, max_length=8)  # one gang
    state: ReplicaState
    # Queue wait is measured in tokens still to generate, not requests: one long answer
    # outweighs many short ones.
    outstanding_tokens: int = Field(default=0, ge=0, le=MAX_STORED_INT)
    active_leases: int = Field(default=0, ge=0, le=MAX_STORED_INT)

    _numbers = numbers_not_booleans("outstanding_tokens", "active_leases")


class NodeHeartbeat(BaseModel):
    """What a node is doing now; each heartbeat replaces the previous one's metrics, caches and replicas."""

    model_config = _STRICT

    node_id: str = Field(pattern=NODE_ID_PATTERN)
    gpus: list[GpuHealth] = Field(default_factory=list, max_length=64)
    cached_weights: list[CachedModelWeights] = Field(default_factory=list, max_length=10_000)
    replicas: list[ReplicaReport] = Field(default_factory=list, max_length=512)
    leaving: bool = Field(default=False, description="the node is shutting down: place nothing new on it")
    # Where the node serves its cached weights to peers of its datacenter (sdk/wire/peers.py); none: it serves none.
    # The host defaults to the address the heartbeat came from (a node bound to 0.0.0.0 cannot name one).
    peer_port: int | None = Field(default=None, ge=1, le=65_535)
    peer_host: str | None = Field(default=None, pattern=PEER_HOST_PATTERN)
    transfers: list[TransferSample] = Field(
        default_factory=list, max_length=64, description="its disk and origin reads measured since the last beat"
    )

    _hb_numbers = numbers_not_booleans("peer_port")


class GpuView(GpuDescription):
    """A GPU with its latest metrics (none until the first heartbeat)."""

    model_config = ConfigDict(extra="ignore")

    memory_used_mib: int | None = None
    utilization_pct: int | None = None
    ecc_errors: int | None = None
    healthy: bool = True
    reason: str | None = None


class ReplicaView(BaseModel):
    """A replica on the fleet, with where it runs."""

    replica_id: str
    node_id: str
    datacenter: str
    zone: str
    model: str
    gpu_indexes: list[int]
    state: ReplicaState
    outstanding_tokens: int = 0
    active_leases: int = 0
    updated_at: datetime | None = None
    proven: bool = Field(
        default=False,
        description="a pool started it (its GPU reservation is the record): only such a replica is leased; any other"
        " is the node's claim, its memory counted but never served from",
    )


class NodeView(BaseModel):
    """A node as the control plane knows it: its spec, its latest heartbeat, its status."""

    node_id: str
    datacenter: str
    zone: str
    capacity: Capacity
    usd_per_hour: float
    labels: dict[str, str] = Field(
        default_factory=dict,
        description="the node's own labels, and its trust labels (dedicated) and pool only as an operator set them",
    )
    pool: str | None = Field(default=None, description="the node pool it joined through a pool token; none: not one")
    disk_bandwidth_gbps: float
    weights_cache_capacity_bytes: int = 0
    engines: list[str] = Field(default_factory=list, description="the engines it runs; empty: not stated, any")
    gpus: list[GpuView] = Field(default_factory=list)
    cached_weights: list[CachedModelWeights] = Field(default_factory=list)
    replicas: list[ReplicaView] = Field(default_factory=list)
    status: NodeStatus
    registered_at: datetime
    last_heartbeat_at: datetime | None = None
    preempt_by: datetime | None = Field(default=None, description="a preemption notice: the node leaves by then")


class PreemptRequest(BaseModel):
    """Take a node away as a spot reclaim would: it takes no new work and leaves within `notice_s`."""

    model_config = _STRICT

    notice_s: float = Field(default=30.0, ge=0, le=3600, description="the warning it gets (spot: ~120 s)")

    _numbers = numbers_not_booleans("notice_s")


class NodeRegistered(BaseModel):
    """The answer to a registration: the node, and the secret its heartbeats must carry.

    Only a hash of the secret is stored, so this is the one time it is shown; a node that
    re-registers sends it back (header `X-Berth-Node-Secret`) to prove it is the same node.
    """

    node: NodeView
    node_secret: str


class NodeTrust(BaseModel):
    """An operator's word on a node's trust labels, replacing what was set before: what placement's trust
    boundaries read of the node (a label the node registers itself is never read for them)."""

    model_config = _STRICT

    dedicated: str | None = Field(
        default=None, pattern=NAME_PATTERN, description="the tenant the node serves alone; none: every tenant"
    )

    def labels(self) -> dict[str, str]:
        return {"dedicated": self.dedicated} if self.dedicated else {}


class AdmitRequest(BaseModel):
    """Mint a per-node join token: how long it may wait to be used."""

    model_config = _STRICT

    ttl_s: int = Field(
        default=DEFAULT_ADMIT_TTL_S,
        ge=MIN_ADMIT_TTL_S,
        le=MAX_ADMIT_TTL_S,
        description="seconds until the token expires, used or not",
    )


class NodeAdmission(BaseModel):
    """A per-node join token: it admits one node id, once, until `expires_at`. Only its hash is kept, so this
    is the one time it is shown; the node presents it as its join token (`berth node --join-token`)."""

    node_id: str
    join_token: str
    expires_at: datetime


class NodeRevocation(BaseModel):
    """What revoking (or removing) a node did: its credential is dead, and the tasks it ran steps for were told
    to move them (`tasks_unreached`: a workflow that had ended, or Temporal did not answer)."""

    node_id: str
    removed: bool = Field(description="the node's rows are gone too: its id may be admitted anew")
    tasks_moved: list[str] = Field(default_factory=list)
    tasks_unreached: list[str] = Field(default_factory=list)
