"""The control-plane store: tasks, agents, checkpoints, the token ledger, task events,
the model catalogue, the GPU fleet, its samples over time (the console's charts) and who is
admitted to it, the pool's leases and GPU reservations, which control-plane replica leads a
job, and who may call the API (tenants, API keys, the audit log).

One SQL database behind small classes, each over the same engine. SQLite by default
(one file that the API server and the worker share), any SQLAlchemy URL at scale:

    store = Store.open("sqlite:///.berth/berth.db")
    ref = store.checkpoints.write_root(task_id, messages, state={})

Every method is synchronous and opens its own short transaction; async callers (FastAPI)
run them in a thread pool, Temporal runs them as local activities in threads. A request that
checks some rows and writes others runs its calls in one transaction instead (`Store.transaction`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields, replace

from sqlalchemy import Engine

from .agents import SqlAgentRegistry
from .audit import SqlAuditLog
from .checkpoints import (
    CheckpointConflict,
    CheckpointCorrupt,
    CheckpointNotFound,
    CheckpointSummary,
    SqlCheckpointStore,
)
from .connections import on_connection
from .database import open_database
from .events import SqlEventLog
from .fleet import NodeConflict, NodeNotApproved, NodeNotFound, NodeRevoked, NodeSecretRefused, SqlFleet
from .fleet_samples import SqlFleetSamples
from .keys import KeyConflict, KeyHolder, SqlApiKeys
from .leadership import SqlLeadership
from .leases import CallReservation, LeaseRecord, SqlLeases
from .ledger import LedgerTotals, SqlTokenLedger
from .listeners import SqlHeartbeatListeners
from .models import SqlModelCatalogue
from .node_admission import Joined, JoinTokenRefused, SqlNodeAdmission
from .node_pools import PoolFull, PoolTokenRefused, SqlNodePools
from .peers import SqlPeers
from .reservations import Reservation, SqlReservations
from .sessions import NewSession, SqlUiSessions, UiSession
from .tasks import SqlTaskRegistry, TaskConflict, TaskRecord, UnsettledTask
from .tenants import SqlTenants


@dataclass(frozen=True)
class Store:
    """The stores of one database."""

    engine: Engine
    checkpoints: SqlCheckpointStore
    ledger: SqlTokenLedger
    tasks: SqlTaskRegistry
    agents: SqlAgentRegistry
    events: SqlEventLog
    models: SqlModelCatalogue
    fleet: SqlFleet
    fleet_samples: SqlFleetSamples
    peers: SqlPeers
    node_admission: SqlNodeAdmission
    node_pools: SqlNodePools
    leases: SqlLeases
    reservations: SqlReservations
    leadership: SqlLeadership
    heartbeat_listeners: SqlHeartbeatListeners
    tenants: SqlTenants
    keys: SqlApiKeys
    audit: SqlAuditLog
    ui_sessions: SqlUiSessions

    @classmethod
    def open(cls, url: str) -> Store:
        """Open (and create if needed) the database at `url`."""
        return cls.from_engine(open_database(url))

    @classmethod
    def from_engine(cls, engine: Engine) -> Store:
        return cls(
            engine=engine,
            checkpoints=SqlCheckpointStore(engine),
            ledger=SqlTokenLedger(engine),
            tasks=SqlTaskRegistry(engine),
            agents=SqlAgentRegistry(engine),
            events=SqlEventLog(engine),
            models=SqlModelCatalogue(engine),
            fleet=SqlFleet(engine),
            fleet_samples=SqlFleetSamples(engine),
            peers=SqlPeers(engine),
            node_admission=SqlNodeAdmission(engine),
            node_pools=SqlNodePools(engine),
            leases=SqlLeases(engine),
            reservations=SqlReservations(engine),
            leadership=SqlLeadership(engine),
            heartbeat_listeners=SqlHeartbeatListeners(engine),
            tenants=SqlTenants(engine),
            keys=SqlApiKeys(engine),
            audit=SqlAuditLog(engine),
            ui_sessions=SqlUiSessions(engine),
        )

    @contextmanager
    def transaction(self) -> Iterator[Store]:
        """This store with all its classes on one connection, so that their statements are one transaction:
        committed when the block ends, rolled back together when it raises.

        For a request that checks rows and then writes others (a node's settle: its lease, then the ledger row
        and the event), so that its writes land together or not at all, and it pays for one connection and one
        commit rather than one per statement. The classes' own commits only flush in here. A write that
        recovers from a concurrent duplicate by rolling back (the add-if-absent inserts that catch
        IntegrityError) would end the transaction, so only writes that cannot fail that way belong in one: the
        ledger's `record` (it skips a taken key), an event's `append`, a lease's `reserve_call`."""
        with self.engine.begin() as connection:
            yield replace(
                self,
                **{
                    f.name: on_connection(getattr(self, f.name), connection) for f in fields(self) if f.name != "engine"
                },
            )

    def close(self) -> None:
        """Close the engine's pooled connections (tests, and processes shutting down)."""
        self.engine.dispose()


__all__ = [
    "CheckpointConflict",
    "CheckpointCorrupt",
    "CheckpointNotFound",
    "CheckpointSummary",
    "KeyConflict",
    "KeyHolder",
    "CallReservation",
    "LeaseRecord",
    "LedgerTotals",
    "NewSession",
    "Joined",
    "JoinTokenRefused",
    "PoolFull",
    "PoolTokenRefused",
    "NodeConflict",
    "NodeNotApproved",
    "NodeNotFound",
    "NodeRevoked",
    "NodeSecretRefused",
    "Reservation",
    "SqlFleet",
    "SqlHeartbeatListeners",
    "SqlLeadership",
    "SqlLeases",
    "SqlAgentRegistry",
    "SqlApiKeys",
    "SqlAuditLog",
    "SqlCheckpointStore",
    "SqlEventLog",
    "SqlModelCatalogue",
    "SqlNodeAdmission",
    "SqlNodePools",
    "SqlReservations",
    "SqlTaskRegistry",
    "SqlTenants",
    "SqlTokenLedger",
    "SqlUiSessions",
    "Store",
    "TaskConflict",
    "TaskRecord",
    "UiSession",
    "UnsettledTask",
    "open_database",
]
