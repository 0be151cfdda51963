"""The agent registry: every version of every agent, and which one new tasks get.

A version is the hash of the agent's content (AgentSpec.content_version), so an author's
process that registers its agent on every start is a no-op until the code changes. Old
versions are kept: a task that started on one keeps its spec in its TaskRun, and the UI
can show what changed. The current version is the one activated last, kept as a timestamp
rather than a flag, so two registrations racing can never leave two current versions.

A name belongs to the tenant whose key registered it first (or to every tenant, when a key
of no tenant did): its instructions are that tenant's, so other tenants neither see nor
change it. Readers pass the tenant they act for (`visible_to`); None reads every agent.
"""

from __future__ import annotations

import builtins
import threading
from datetime import timedelta

import sqlalchemy as sa
from sqlalchemy import Engine, bindparam, update
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from sdk import AgentSpec

from .connections import connected
from .tables import AgentRow, table_of, utcnow

_AGENTS = table_of(AgentRow)
_VERSION = sa.select(_AGENTS.c.spec_json, _AGENTS.c.tenant).where(
    _AGENTS.c.name == bindparam("name"), _AGENTS.c.version == bindparam("version")
)
# Versions whose specs a process keeps: the agents of the tasks it serves, each at the versions they started on.
_VERSIONS_KEPT = 1024


class SqlAgentRegistry:
    """Agents on the control-plane database (activities.step.ports.AgentCatalogue and the API)."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._versions: dict[tuple[str, str], tuple[str, str | None]] = {}  # (name, version) -> spec JSON, owner
        self._remembering = threading.Lock()

    def register(self, spec: AgentSpec, tenant: str | None = None) -> AgentSpec:
        """Store `spec` under its content version and make that version current; a new name
        belongs to `tenant` (the caller checks `owner` first: a name keeps its first owner).

        Registering the current content again changes nothing; registering an older
        version's content makes that version current again (the author rolled back).
        """
        version = spec.content_version()
        stored = spec.model_copy(update={"version": version})
        with Session(self._engine) as session:
            current = self._current_row(session, spec.name)
        if current is not None and current.version == version:
            return stored
        if current is not None:
            tenant = current.tenant
        now = utcnow()
        if current is not None and now <= current.activated_at:  # a clock step back must not hide the new version
            now = current.activated_at + timedelta(microseconds=1)
        # A write transaction of its own that starts with a write: SQLite then waits for the lock
        # (busy_timeout) instead of failing to upgrade a read transaction another writer overtook.
        with Session(self._engine) as session:
            activate = (
                update(AgentRow)
                .where(col(AgentRow.name) == spec.name, col(AgentRow.version) == version)
                .values(activated_at=now)
                .execution_options(synchronize_session=False)
            )
            if session.exec(activate).rowcount:
                session.commit()
                return stored
            session.add(
                AgentRow(
                    name=spec.name,
                    version=version,
                    spec_json=stored.model_dump_json(),
                    registered_at=now,
                    activated_at=now,
                    tenant=tenant,
                )
            )
            try:
                session.commit()
            except IntegrityError:
                session.rollback()  # registered concurrently by another process: the same content, so done
        return stored

    def get(self, name: str, version: str | None = None, visible_to: str | None = None) -> AgentSpec | None:
        """The current version of `name`, or the given version; None too when `visible_to` may not see it.

        A given version is its content's hash, so what it names never changes: it is read from the database
        once per process (a node's every prepare counts the tool schemas of its task's agent version)."""
        if version is None:
            with Session(self._engine) as session:
                row = self._current_row(session, name)
            found = (row.spec_json, row.tenant) if row is not None else None
        else:
            found = self._version(name, version)
        if found is None or not _visible(found[1], visible_to):
            return None
        return AgentSpec.model_validate_json(found[0])

    def _version(self, name: str, version: str) -> tuple[str, str | None] | None:
        """(the spec's JSON, the name's owner) of one version, remembered once found; None (not remembered) while
        it is not registered."""
        found = self._versions.get((name, version))
        if found is None:
            with connected(self._engine) as connection:
                row = connection.execute(_VERSION, {"name": name, "version": version}).first()
            if row is None:
                return None
            found = (row.spec_json, row.tenant)
            with self._remembering:
                self._versions[(name, version)] = found
                while len(self._versions) > _VERSIONS_KEPT:
                    del self._versions[next(iter(self._versions))]
        return found

    def owner(self, name: str) -> tuple[bool, str | None]:
        """(whether `name` is registered, the tenant it belongs to: None for every tenant)."""
        with Session(self._engine) as session:
            row = self._current_row(session, name)
        return (row is not None, row.tenant if row is not None else None)

    def list(self, visible_to: str | None = None) -> builtins.list[AgentSpec]:
        """The current version of every agent `visible_to` may see (every agent for None), by name."""
        with Session(self._engine) as session:
            rows = session.exec(
                select(AgentRow).order_by(
                    col(AgentRow.name), col(AgentRow.activated_at).desc(), col(AgentRow.id).desc()
                )
            ).all()
        current: dict[str, AgentRow] = {}
        for row in rows:
            current.setdefault(row.name, row)
        return [
            AgentSpec.model_validate_json(row.spec_json) for row in current.values() if _visible(row.tenant, visible_to)
        ]

    def versions(self, name: str) -> builtins.list[str]:
        """Every version of `name`, oldest registration first."""
        with Session(self._engine) as session:
            rows = session.exec(
                select(AgentRow.version)
                .where(AgentRow.name == name)
                .order_by(col(AgentRow.registered_at), col(AgentRow.id))
            ).all()
        return builtins.list(rows)

    @staticmethod
    def _current_row(session: Session, name: str) -> AgentRow | None:
        return session.exec(
            select(AgentRow)
            .where(AgentRow.name == name)
            .order_by(col(AgentRow.activated_at).desc(), col(AgentRow.id).desc())
            .limit(1)
        ).first()


def _visible(owner: str | None, visible_to: str | None) -> bool:
    return visible_to is None or owner is None or owner == visible_to
