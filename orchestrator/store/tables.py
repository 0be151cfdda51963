"""The control plane's tables, one row type per record the store keeps.

Each table carries the indexes its queries need and nothing else: the store is written on
every step of every task, so an unused index is a cost paid for nothing. Rows hold plain
columns for what is filtered or sorted on and JSON text for the rest, so a new field of a
pydantic contract never needs a migration.

Table names are explicit (not sqlmodel's lower-cased class names) because the pool's tables
share the same `SQLModel.metadata` and the same database.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, cast

from sqlalchemy import BigInteger, DateTime, Index, Integer, LargeBinary, Table, Text, UniqueConstraint, inspect
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import Mapper
from sqlalchemy.types import TypeDecorator
from sqlmodel import Field, SQLModel

# Every integer column is 64-bit, as sdk.wire.limits.MAX_STORED_INT promises the API's callers. SQLite's
# INTEGER already is; PostgreSQL's is 32-bit (a 16 GiB weights size overflows it), so there it is
# BIGINT. SQLite keeps the name INTEGER: only an `INTEGER PRIMARY KEY` is its rowid (and AUTOINCREMENT
# accepts no other type).
Int64 = BigInteger().with_variant(Integer(), "sqlite")


def utcnow() -> datetime:
    return datetime.now(UTC)


def table_of(row: type[SQLModel]) -> Table:
    """The Core table a row type is mapped to, for the statements the store builds once at import.

    SQLModel sets `__table__` on every `table=True` class but does not declare it, so a type checker sees no
    such attribute; the class's mapper holds the same Table as its `local_table` (typed as any FromClause: a
    declarative class with a table of its own always has a Table there).
    """
    mapper: Mapper[Any] = inspect(row)
    return cast(Table, mapper.local_table)


class UtcDateTime(TypeDecorator[datetime]):
    """A timestamp that is always timezone-aware UTC when read back.

    SQLite has no timezone type and returns naive datetimes; PostgreSQL's timestamptz
    returns aware ones in the session's zone. Storing UTC and re-attaching UTC on the way
    out gives both the same behaviour, and keeps SQLite's text timestamps sortable.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:  # pydantic parses ISO strings without an offset as naive: take them as UTC
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


class TaskRow(SQLModel, table=True):
    """A task's latest state; the columns the task list filters on are copied out of the JSON."""

    __tablename__ = "tasks"
    __table_args__ = (
        # The task list filters on one of these and pages newest first.
        Index("ix_tasks_created", "created_at"),
        Index("ix_tasks_updated", "updated_at"),
        Index("ix_tasks_tenant_created", "tenant", "created_at"),
        Index("ix_tasks_status_created", "status", "created_at"),
        Index("ix_tasks_agent_created", "agent", "created_at"),
        Index("ix_tasks_parent_created", "parent_task_id", "created_at"),
        # The stuck-task gauge counts the few rows with one, on every scrape.
        Index("ix_tasks_stuck_since", "stuck_since"),
    )

    task_id: str = Field(primary_key=True)
    status: str
    tenant: str
    agent: str
    model: str = ""  # added after the first release: rows from before read "" (the UI's model filter misses them)
    parent_task_id: str | None = None
    spec_json: str | None = Field(default=None, sa_type=Text)
    state_json: str = Field(sa_type=Text)
    created_at: datetime = Field(default_factory=utcnow, sa_type=UtcDateTime)
    updated_at: datetime = Field(default_factory=utcnow, sa_type=UtcDateTime)
    # The control plane's finding that Temporal cannot run the task's workflow code (sdk.Stuck), beside the state
    # rather than in it: the workflow writes state_json and the reconciler writes these, so neither overwrites the
    # other's word. `stuck_since` is a column of its own so that the stuck tasks are counted through its index.
    stuck_json: str | None = Field(default=None, sa_type=Text)
    stuck_since: datetime | None = Field(default=None, sa_type=UtcDateTime)


class AgentRow(SQLModel, table=True):
    """One version of an agent. The current version is the one activated last."""

    __tablename__ = "agents"
    __table_args__ = (
        UniqueConstraint("name", "version", name="uq_agents_name_version"),
        Index("ix_agents_name_activated", "name", "activated_at"),
    )

    id: int | None = Field(default=None, primary_key=True, sa_type=Int64)
    name: str
    version: str
    spec_json: str = Field(sa_type=Text)
    registered_at: datetime = Field(default_factory=utcnow, sa_type=UtcDateTime)
    activated_at: datetime = Field(default_factory=utcnow, sa_type=UtcDateTime)
    # The tenant whose key first registered the name: only it sees and changes the agent. None: a key
    # of no tenant (admin, operator) registered it, and every tenant may use it.
    tenant: str | None = None


class CheckpointRow(SQLModel, table=True):
    """One checkpoint: the delta since its parent (seq - 1), chained to it by hash.

    `delta` is the canonical JSON of {step, messages, scratch, state}, zlib-compressed when
    that saves space (`encoding` says which). `message_count` is the whole conversation's
    length at this seq, so listing checkpoints never has to decode a delta.
    """

    __tablename__ = "checkpoints"
    __table_args__ = (
        # Also the index of every chain read: WHERE task_id = ? AND seq BETWEEN ? AND ?.
        UniqueConstraint("task_id", "seq", name="uq_checkpoints_task_seq"),
    )

    id: int | None = Field(default=None, primary_key=True, sa_type=Int64)
    task_id: str
    seq: int = Field(sa_type=Int64)
    step: int = Field(sa_type=Int64)
    parent_hash: str
    hash: str
    message_count: int = Field(sa_type=Int64)
    encoding: str
    delta: bytes = Field(sa_type=LargeBinary)
    delta_bytes: int = Field(sa_type=Int64)
    created_at: datetime = Field(default_factory=utcnow, sa_type=UtcDateTime)


class LedgerRow(SQLModel, table=True):
    """One LLM call's (or one lost attempt's) tokens and cost; the unique key makes retried writes count once."""

    __tablename__ = "token_ledger"
    __table_args__ = (UniqueConstraint("task_id", "step", "attempt", "kind", name="uq_ledger_call"),)

    id: int | None = Field(default=None, primary_key=True, sa_type=Int64)
    task_id: str
    step: int = Field(sa_type=Int64)
    attempt: int = Field(sa_type=Int64)
    kind: str
    model: str
    prompt_tokens: int = Field(sa_type=Int64)
    completion_tokens: int = Field(sa_type=Int64)
    cost_usd: float
    ttft_s: float
    duration_s: float
    served_by: str
    response_id: str = ""  # the engine's reply id: tells a replayed reply from a new one on retry
    created_at: datetime = Field(default_factory=utcnow, sa_type=UtcDateTime)


class ModelRow(SQLModel, table=True):
    """One catalogue entry and its scaling policy, as JSON: both are validated pydantic models."""

    __tablename__ = "models"

    name: str = Field(primary_key=True)
    entry_json: str = Field(sa_type=Text)
    policy_json: str = Field(sa_type=Text)
    updated_at: datetime = Field(default_factory=utcnow, sa_type=UtcDateTime)
    # What the scaler learned and pre-warmed (sdk.wire.catalogue.ModelForesight), published by its leader.
    foresight_json: str | None = Field(default=None, sa_type=Text)


class EventRow(SQLModel, table=True):
    """One entry of a task's event stream; `seq` is global so a reader can resume after the last it saw."""

    __tablename__ = "task_events"
    __table_args__ = (
        Index("ix_task_events_task_seq", "task_id", "seq"),
        Index("ix_task_events_kind_at", "kind", "at"),  # the overview's "in the last hour" counts
        # AUTOINCREMENT: SQLite may otherwise reuse a deleted top rowid, and a reader's cursor would skip it.
        {"sqlite_autoincrement": True},
    )

    seq: int | None = Field(default=None, primary_key=True, sa_type=Int64)
    task_id: str
    kind: str
    at: datetime = Field(default_factory=utcnow, sa_type=UtcDateTime)
    data_json: str = Field(sa_type=Text)


class NodeRow(SQLModel, table=True):
    """A registered node: its spec as JSON, and the columns the fleet is filtered on.

    `status` is derived from the admission and the flags (revoked > pending > lost > draining >
    unhealthy > healthy) on every write, so a list by status is one indexed read. `seen_at` is the
    last contact of any kind (registration or heartbeat): the reaper's clock, indexed because it
    scans by it.
    """

    __tablename__ = "nodes"
    __table_args__ = (
        Index("ix_nodes_status", "status"),
        Index("ix_nodes_datacenter", "datacenter"),
        Index("ix_nodes_seen", "seen_at"),
    )

    node_id: str = Field(primary_key=True)
    status: str
    datacenter: str
    spec_json: str = Field(sa_type=Text)
    secret_sha256: str  # "" once revoked: no secret hashes to it
    # "admitted" (a per-node token, or an operator's approval), "pending" (joined with the cluster token,
    # waiting for approval) or "revoked". Rows from before admission existed were all in the fleet.
    admission: str = Field(default="admitted", sa_column_kwargs={"server_default": "admitted"})
    # The trust labels an operator set (sdk.wire.fleet.TRUST_LABELS, e.g. {"dedicated": "acme"}), as JSON: the only
    # ones placement reads. The node's own spec may name some too; those are never believed.
    trust_labels_json: str = Field(default="{}", sa_column_kwargs={"server_default": "{}"})
    # The node pool it joined through a pool token (node_pools.py): the token's word, an operator's, never the
    # node's own labels; and that token, whose place the node holds until it is removed.
    pool: str | None = None
    pool_token_id: str | None = None
    draining: bool = False  # an operator's drain
    leaving: bool = False  # the node said it is shutting down; cleared when it registers again
    preempt_by: datetime | None = Field(default=None, sa_type=UtcDateTime)  # a preemption notice's deadline
    lost: bool = False
    registered_at: datetime = Field(default_factory=utcnow, sa_type=UtcDateTime)
    seen_at: datetime = Field(default_factory=utcnow, sa_type=UtcDateTime)
    last_heartbeat_at: datetime | None = Field(default=None, sa_type=UtcDateTime)
    # Where the node serves its cached weights to peers of its datacenter, as its last heartbeat said.
    peer_host: str | None = None
    peer_port: int | None = Field(default=None, sa_type=Int64)


class NodeJoinTokenRow(SQLModel, table=True):
    """A per-node join token: the sha256 of its secret (never the secret), the one node id it admits, until when.

    A used token stays (with `used_at`) until it expires, so a second use is refused as used, not as unknown.
    """

    __tablename__ = "node_join_tokens"
    __table_args__ = (Index("ix_node_join_tokens_node", "node_id"),)  # voided together when the node is admitted

    token_sha256: str = Field(primary_key=True)
    node_id: str
    created_by: str | None = None  # the API key that minted it
    created_at: datetime = Field(default_factory=utcnow, sa_type=UtcDateTime)
    expires_at: datetime = Field(sa_type=UtcDateTime)
    used_at: datetime | None = Field(default=None, sa_type=UtcDateTime)


class NodePoolTokenRow(SQLModel, table=True):
    """A pool token: the sha256 of its secret (never the secret), the pool its nodes join, how many of them the
    fleet may hold at once (`nodes` counts the places taken), until when, and whether it was revoked.

    `nodes` is raised by one conditional UPDATE per join (node_pools.py), so concurrent joins never pass
    `max_nodes`; a removed node gives its place back. A revoked or expired token stays, so a join with it is
    refused as revoked or expired, not as unknown, and its nodes still name it.
    """

    __tablename__ = "node_pool_tokens"
    __table_args__ = (UniqueConstraint("token_sha256", name="uq_node_pool_tokens_sha256"),)

    token_id: str = Field(primary_key=True)
    token_sha256: str
    pool: str
    max_nodes: int = Field(sa_type=Int64)
    nodes: int = Field(default=0, sa_type=Int64)
    trust_labels_json: str = "{}"
    created_by: str | None = None  # the API key that minted it
    created_at: datetime = Field(default_factory=utcnow, sa_type=UtcDateTime)
    expires_at: datetime = Field(sa_type=UtcDateTime)
    revoked_at: datetime | None = Field(default=None, sa_type=UtcDateTime)


class NodeGpuRow(SQLModel, table=True):
    """One GPU of a node and its latest metrics; the description columns come from registration."""

    __tablename__ = "node_gpus"
    __table_args__ = (UniqueConstraint("node_id", "gpu_index", name="uq_node_gpus_node_index"),)

    id: int | None = Field(default=None, primary_key=True, sa_type=Int64)
    node_id: str
    gpu_index: int = Field(sa_type=Int64)
    type_name: str
    description_json: str = Field(sa_type=Text)
    memory_used_mib: int | None = Field(default=None, sa_type=Int64)
    utilization_pct: int | None = Field(default=None, sa_type=Int64)
    ecc_errors: int | None = Field(default=None, sa_type=Int64)
    healthy: bool = True
    reason: str | None = None


class ReplicaRow(SQLModel, table=True):
    """A replica a node reports running; the node's heartbeat replaces its whole set."""

    __tablename__ = "replicas"
    __table_args__ = (Index("ix_replicas_model", "model"), Index("ix_replicas_node", "node_id"))

    id: int | None = Field(default=None, primary_key=True, sa_type=Int64)
    node_id: str
    replica_id: str = ""
    model: str
    gpu_indexes_json: str
    state: str
    outstanding_tokens: int = Field(default=0, sa_type=Int64)
    active_leases: int = Field(default=0, sa_type=Int64)
    updated_at: datetime = Field(default_factory=utcnow, sa_type=UtcDateTime)


class NodeWeightsRow(SQLModel, table=True):
    """A model's weights on a node's local disk, as its last heartbeat reported."""

    __tablename__ = "node_weights"
    __table_args__ = (
        UniqueConstraint("node_id", "model", name="uq_node_weights_node_model"),
        Index("ix_node_weights_model", "model"),  # "which nodes hold these weights" is the disk tier's question
    )

    id: int | None = Field(default=None, primary_key=True, sa_type=Int64)
    node_id: str
    model: str
    size_bytes: int = Field(sa_type=Int64)


class PeerTicketRow(SQLModel, table=True):
    """A ticket for one node to copy one model's files from one peer (store/peers.py): its sha256 (never the
    ticket), who may present it to whom, the files it covers, until when, and whether its copy was reported
    (a closed ticket is refused: no replay)."""

    __tablename__ = "peer_tickets"
    __table_args__ = (Index("ix_peer_tickets_created", "created_at"),)  # old tickets are swept by age

    ticket_sha256: str = Field(primary_key=True)
    source_node: str
    dest_node: str
    model: str
    files_json: str = Field(sa_type=Text)
    created_at: datetime = Field(default_factory=utcnow, sa_type=UtcDateTime)
    expires_at: datetime = Field(sa_type=UtcDateTime)
    closed_at: datetime | None = Field(default=None, sa_type=UtcDateTime)
    outcome: str | None = None
    # The evidence a report is judged by (store/peer_evidence.py): the files the source asked, under this ticket,
    # to serve (a JSON list of sha256s), and whether the report showed what the control plane saw.
    served_json: str | None = Field(default=None, sa_type=Text)
    evidenced: bool | None = None


class WeightsOrderRow(SQLModel, table=True):
    """An operator's pre-warm of `model` onto `node_id` (POST /v1/models/{name}/prewarm): a load the control plane
    placed without a replica, so the node may be minted peer tickets for that model `until` then."""

    __tablename__ = "weights_orders"
    __table_args__ = (Index("ix_weights_orders_node_model", "node_id", "model"),)

    id: int | None = Field(default=None, primary_key=True, sa_type=Int64)
    node_id: str
    model: str
    until: datetime = Field(sa_type=UtcDateTime)


class PeerDisputeRow(SQLModel, table=True):
    """A copy from `node_id` of `model` that failed its hash (or could not be served), as `reported_by` said."""

    __tablename__ = "peer_disputes"
    __table_args__ = (Index("ix_peer_disputes_node_model", "node_id", "model"), Index("ix_peer_disputes_at", "at"))

    id: int | None = Field(default=None, primary_key=True, sa_type=Int64)
    node_id: str
    model: str
    reported_by: str
    outcome: str
    reason: str | None = None
    at: datetime = Field(default_factory=utcnow, sa_type=UtcDateTime)


class TransferSampleRow(SQLModel, table=True):
    """One measured transfer into `node_id`: from its disk, the origin, or a peer (`source_node`). The pool's
    learned bandwidths replay these in id order (pool/bandwidth.py)."""

    __tablename__ = "transfer_samples"
    __table_args__ = (Index("ix_transfer_samples_at", "at"),)

    id: int | None = Field(default=None, primary_key=True, sa_type=Int64)
    node_id: str
    tier: str  # "disk", "origin" or "datacenter"
    source_node: str | None = None  # the peer, for "datacenter"
    bytes: int = Field(sa_type=Int64)
    seconds: float
    at: datetime = Field(default_factory=utcnow, sa_type=UtcDateTime)


class LeaseRow(SQLModel, table=True):
    """A worker lease a step holds on a replica: the pool's bookings, kept so a restarted pool counts them.

    One lease per (task, step): an acquire retried by Temporal finds the lease it already made.
    Released leases are deleted, so the table holds only what is in flight.
    """

    __tablename__ = "leases"
    __table_args__ = (
        UniqueConstraint("task_id", "step", name="uq_leases_task_step"),
        Index("ix_leases_node", "node_id"),
    )

    lease_id: str = Field(primary_key=True)
    task_id: str
    step: int = Field(sa_type=Int64)
    model: str
    node_id: str
    replica_id: str
    tokens: int = Field(sa_type=Int64)
    tenant: str
    created_replica: bool = False
    created_at: datetime = Field(default_factory=utcnow, sa_type=UtcDateTime)
    # The pool (control-plane replica) that granted it; the other pools count it as load on its replica.
    pool_id: str = Field(default="", sa_column_kwargs={"server_default": ""})
    # What the step may spend (sdk.wire.lease.StepLimits, from its workflow), and what the control plane reserved
    # for its call once it counted the prompt: the bounds on everything the node books under this lease.
    limits_json: str = Field(default="", sa_type=Text, sa_column_kwargs={"server_default": ""})
    reservation_json: str | None = Field(default=None, sa_type=Text)


class StepAttemptRow(SQLModel, table=True):
    """An attempt of a leased step that a node prepared, and what the control plane reserved for it: the evidence a
    node's later bookings of that attempt are checked against (it started, and could have written at most its
    grant). Kept after the lease is released, for the placement that takes the step over books its dead attempts.
    """

    __tablename__ = "step_attempts"

    task_id: str = Field(primary_key=True)
    step: int = Field(primary_key=True, sa_type=Int64)
    attempt: int = Field(primary_key=True, sa_type=Int64)
    lease_id: str
    prompt_tokens: int = Field(sa_type=Int64)
    max_tokens: int = Field(sa_type=Int64)
    prepared_at: datetime = Field(default_factory=utcnow, sa_type=UtcDateTime)


class GpuReservationRow(SQLModel, table=True):
    """GPU memory a pool took for a replica it started, checked against every pool's under the node's lock.

    Several control-plane replicas each place on their own view of the fleet; this row is what makes a
    second pool see, and be refused, GPUs another pool took a moment ago, before any node reports them.
    """

    __tablename__ = "gpu_reservations"
    __table_args__ = (Index("ix_gpu_reservations_node", "node_id"),)

    replica_id: str = Field(primary_key=True)
    node_id: str
    model: str
    gpu_indexes_json: str
    per_device_gib: float
    owner: str | None = None  # the isolated tenant whose replica holds the devices alone
    pool_id: str
    created_at: datetime = Field(default_factory=utcnow, sa_type=UtcDateTime)
    # When its node first listed the replica: from then on the node's report, not this row, says whether its
    # memory is taken (a replica the node stops listing has left its GPUs, whatever the load's grace).
    reported_at: datetime | None = Field(default=None, sa_type=UtcDateTime)


class LeadershipRow(SQLModel, table=True):
    """Who does a job that only one control-plane replica may do at a time (the scaler), until when."""

    __tablename__ = "leadership"

    job: str = Field(primary_key=True)
    holder: str
    expires_at: datetime = Field(sa_type=UtcDateTime)


class HeartbeatListenerRow(SQLModel, table=True):
    """A control-plane API process that takes node heartbeats: listening since it started, alive at its last
    beat. A node's silence counts as evidence of its loss only while some listener was there to hear it."""

    __tablename__ = "heartbeat_listeners"

    listener_id: str = Field(primary_key=True)
    since: datetime = Field(sa_type=UtcDateTime)
    alive_at: datetime = Field(sa_type=UtcDateTime)


class TenantRow(SQLModel, table=True):
    """A tenant: how far its work may share GPUs, how many it may hold, its tasks' default budget and objectives."""

    __tablename__ = "tenants"

    name: str = Field(primary_key=True)
    trust: str
    gpu_quota: int | None = Field(default=None, sa_type=Int64)
    default_budget_tokens: int | None = Field(default=None, sa_type=Int64)
    default_budget_usd: float | None = None
    # Its tasks' latency objectives (sdk.LatencyObjectives) as JSON, only the fields it sets; None: it sets none.
    objectives_json: str | None = Field(default=None, sa_type=Text)
    created_at: datetime = Field(default_factory=utcnow, sa_type=UtcDateTime)
    updated_at: datetime = Field(default_factory=utcnow, sa_type=UtcDateTime)


class ApiKeyRow(SQLModel, table=True):
    """An API key: the sha256 of its secret (never the secret), its role and its tenant."""

    __tablename__ = "api_keys"

    key_id: str = Field(primary_key=True)
    secret_sha256: str
    role: str
    tenant: str | None = None
    name: str = ""
    description: str = ""
    created_at: datetime = Field(default_factory=utcnow, sa_type=UtcDateTime)
    revoked_at: datetime | None = Field(default=None, sa_type=UtcDateTime)
    last_used_at: datetime | None = Field(default=None, sa_type=UtcDateTime)
    task_id: str | None = None  # a task token: valid while that task runs, and only for it and its sub-agents


class UiSessionRow(SQLModel, table=True):
    """A signed-in admin UI session: the sha256 of its cookie (never the cookie), its key and its CSRF token."""

    __tablename__ = "ui_sessions"

    session_sha256: str = Field(primary_key=True)
    key_id: str = Field(index=True)
    csrf_token: str
    created_at: datetime = Field(default_factory=utcnow, sa_type=UtcDateTime)
    expires_at: datetime = Field(sa_type=UtcDateTime)


class AuditRow(SQLModel, table=True):
    """One state-changing API request: who (key and role), what (method, path, target), when, and its status."""

    __tablename__ = "audit_log"
    # ix_audit_log_at: the audit page's time windows (since/until) on a log that only grows.
    __table_args__ = (
        Index("ix_audit_log_key", "key_id", "id"),
        Index("ix_audit_log_at", "at"),
        {"sqlite_autoincrement": True},
    )

    id: int | None = Field(default=None, primary_key=True, sa_type=Int64)
    at: datetime = Field(default_factory=utcnow, sa_type=UtcDateTime)
    key_id: str | None = None
    role: str | None = None
    tenant: str | None = None
    method: str
    path: str
    target: str | None = None
    status: int = Field(sa_type=Int64)
