"""Tenants: whose tasks are whose, how far their work may share GPUs, their tasks' default budget and objectives.

The tenant "default" always exists, because every task submitted without naming a tenant is
its task (TaskSpec.tenant). It is made on first use rather than when the store opens, so the
many processes that open the store never race to write it.
"""

from __future__ import annotations

import builtins

from sqlalchemy import Engine
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from sdk import Conflict, LatencyObjectives, NotFound
from sdk.wire.identity import DEFAULT_TENANT, Tenant, TenantSpec, TenantUpdate, Trust
from sdk.wire.objective_layers import layer, patched

from .tables import TenantRow, utcnow


def _tenant(row: TenantRow) -> Tenant:
    objectives = LatencyObjectives.model_validate_json(row.objectives_json) if row.objectives_json else None
    return Tenant.model_validate({**row.model_dump(exclude={"objectives_json"}), "objectives": objectives})


def _objectives_json(objectives: LatencyObjectives | None) -> str | None:
    """Only the fields set, so that the layer read back sets what was given and inherits the rest."""
    kept = layer(objectives)
    return kept.model_dump_json(exclude_none=True) if kept is not None else None


class SqlTenants:
    """Tenants on the control-plane database."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._default_made = False

    def create(self, spec: TenantSpec) -> Tenant:
        """Add a tenant; Conflict if the name is taken."""
        self._ensure_default()
        row = TenantRow(
            **spec.model_dump(mode="json", exclude={"objectives"}), objectives_json=_objectives_json(spec.objectives)
        )
        with Session(self._engine) as session:
            session.add(row)
            try:
                session.commit()
            except IntegrityError:
                raise Conflict(f"tenant {spec.name!r} already exists", field="name") from None
            session.refresh(row)
            return _tenant(row)

    def get(self, name: str) -> Tenant | None:
        self._ensure_default()
        with Session(self._engine) as session:
            row = session.get(TenantRow, name)
            return _tenant(row) if row is not None else None

    def list(self) -> builtins.list[Tenant]:
        self._ensure_default()
        with Session(self._engine) as session:
            return [_tenant(r) for r in session.exec(select(TenantRow).order_by(col(TenantRow.name)))]

    def update(self, name: str, change: TenantUpdate) -> Tenant:
        """Apply the fields the change sets (null clears a limit; objectives change field by field, as a JSON merge
        patch); NotFound for an unknown tenant."""
        self._ensure_default()
        values = change.model_dump(mode="json", exclude_unset=True, exclude={"objectives"})
        if values.get("trust", "") is None:
            raise ValueError("trust cannot be cleared")  # the API refuses this before it gets here
        with Session(self._engine) as session:
            # Locked (on PostgreSQL) from the read: two merges of objectives at once must not lose one.
            row = session.get(TenantRow, name, with_for_update=True)
            if row is None:
                raise NotFound(f"tenant {name!r} does not exist", field="name")
            for field, value in values.items():
                setattr(row, field, value)
            if "objectives" in change.model_fields_set:
                row.objectives_json = _objectives_json(patched(_tenant(row).objectives, change.objectives))
            row.updated_at = utcnow()
            session.add(row)
            session.commit()
            session.refresh(row)
            return _tenant(row)

    def _ensure_default(self) -> None:
        if self._default_made:
            return
        with Session(self._engine) as session:
            if session.get(TenantRow, DEFAULT_TENANT) is None:
                session.add(TenantRow(name=DEFAULT_TENANT, trust=Trust.shared.value))
                try:
                    session.commit()
                except IntegrityError:  # another process made it first
                    session.rollback()
        self._default_made = True
