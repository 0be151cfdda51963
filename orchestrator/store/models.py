"""The model catalogue on the control-plane database, editable through the API and CLI.

It is seeded once with Berth's defaults when empty; after that the database is the truth,
so an operator's edit (a price, a new model, a scaling policy) reaches every process.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable

from sqlalchemy import Engine
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from sdk.wire.catalogue import CatalogueModel, ModelEntry, ModelForesight, ScalingPolicy

from .tables import ModelRow, utcnow


class SqlModelCatalogue:
    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def seed(self, entries: Iterable[ModelEntry]) -> None:
        """Add the defaults to an empty catalogue (a catalogue with any model is left alone)."""
        with Session(self._engine) as session:
            if session.exec(select(ModelRow.name).limit(1)).first() is not None:
                return
            for entry in entries:
                session.add(
                    ModelRow(
                        name=entry.name,
                        entry_json=entry.model_dump_json(),
                        policy_json=ScalingPolicy().model_dump_json(),
                    )
                )
            try:
                session.commit()
            except IntegrityError:  # another process seeded at the same moment
                session.rollback()

    def list(self) -> builtins.list[CatalogueModel]:
        with Session(self._engine) as session:
            rows = session.exec(select(ModelRow).order_by(ModelRow.name)).all()
        return [_model(r) for r in rows]

    def get(self, name: str) -> CatalogueModel | None:
        with Session(self._engine) as session:
            row = session.get(ModelRow, name)
        return _model(row) if row is not None else None

    def put(self, entry: ModelEntry) -> CatalogueModel:
        """Create or replace an entry; an existing model keeps its scaling policy."""
        with Session(self._engine) as session:
            row = session.get(ModelRow, entry.name)
            if row is None:
                row = ModelRow(
                    name=entry.name, entry_json=entry.model_dump_json(), policy_json=ScalingPolicy().model_dump_json()
                )
            else:
                row.entry_json, row.updated_at = entry.model_dump_json(), utcnow()
            session.add(row)
            session.commit()
            session.refresh(row)
            return _model(row)

    def set_policy(self, name: str, policy: ScalingPolicy) -> CatalogueModel | None:
        with Session(self._engine) as session:
            row = session.get(ModelRow, name)
            if row is None:
                return None
            row.policy_json, row.updated_at = policy.model_dump_json(), utcnow()
            session.add(row)
            session.commit()
            session.refresh(row)
            return _model(row)

    def publish_foresight(self, views: dict[str, ModelForesight]) -> None:
        """The scaler's leader writes what it learned per model; models not in the catalogue are skipped."""
        if not views:
            return
        with Session(self._engine) as session:
            for row in session.exec(select(ModelRow).where(col(ModelRow.name).in_(list(views)))).all():
                row.foresight_json = views[row.name].model_dump_json()
                session.add(row)
            session.commit()


def _model(row: ModelRow) -> CatalogueModel:
    foresight = ModelForesight.model_validate_json(row.foresight_json) if row.foresight_json else None
    return CatalogueModel(
        entry=ModelEntry.model_validate_json(row.entry_json),
        policy=ScalingPolicy.model_validate_json(row.policy_json),
        foresight=foresight,
    )
