"""Alembic's entry point: migrate on the connection handed in by orchestrator/store/migrate.py, or, for
`alembic revision --autogenerate`, on the database named by BERTH_DATABASE_URL (default a scratch SQLite)."""

from __future__ import annotations

import os

from alembic import context
from sqlalchemy import Connection, create_engine
from sqlmodel import SQLModel

from orchestrator.store import tables  # noqa: F401  (registers the tables on SQLModel.metadata)

config = context.config
target_metadata = SQLModel.metadata


def _run(connection: Connection) -> None:
    # render_as_batch: SQLite alters a table by copying it; Alembic's batch mode does that for us.
    context.configure(
        connection=connection, target_metadata=target_metadata, render_as_batch=connection.dialect.name == "sqlite"
    )
    with context.begin_transaction():
        context.run_migrations()


connection = config.attributes.get("connection")
if connection is not None:
    _run(connection)
else:
    with create_engine(os.environ.get("BERTH_DATABASE_URL", "sqlite:///.berth/alembic-scratch.db")).connect() as conn:
        _run(conn)
