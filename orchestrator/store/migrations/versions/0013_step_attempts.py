"""The attempts of leased steps that nodes prepared, and what was reserved for each (issue 34)

A new table, kept after a lease is released: a node books a dead attempt's tokens only for an attempt the control
plane saw it prepare, each at most that attempt's grant. Steps leased before this revision have no rows, so a node
running one books no dead attempt of it (their prepares from here on are recorded).

Revision ID: 0013_step_attempts
Revises: 0012_node_trust_labels
Create Date: 2026-12-06 08:10:00
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

import orchestrator.store.tables

revision = "0013_step_attempts"
down_revision = "0012_node_trust_labels"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "step_attempts",
        sa.Column("task_id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("step", orchestrator.store.tables.Int64, nullable=False),
        sa.Column("attempt", orchestrator.store.tables.Int64, nullable=False),
        sa.Column("lease_id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("prompt_tokens", orchestrator.store.tables.Int64, nullable=False),
        sa.Column("max_tokens", orchestrator.store.tables.Int64, nullable=False),
        sa.Column("prepared_at", orchestrator.store.tables.UtcDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("task_id", "step", "attempt"),
    )


def downgrade() -> None:
    op.drop_table("step_attempts")
