"""The fleet's samples for the console's charts, kept in the store (issue 35, part 4)

A new table: each API process kept its own last hour of fleet samples in memory, lost at a restart and different
on each replica. A sample is now a row under its 15-second bucket (the key: one sample per bucket whichever
replica took it), kept 24 hours. Charts start empty after this revision and fill as samples are taken.

Revision ID: 0017_fleet_samples
Revises: 0016_node_pool_tokens
Create Date: 2026-12-06 10:10:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import orchestrator.store.tables

revision = "0017_fleet_samples"
down_revision = "0016_node_pool_tokens"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "fleet_samples",
        sa.Column("bucket", orchestrator.store.tables.Int64, autoincrement=False, nullable=False),
        sa.Column("at", orchestrator.store.tables.UtcDateTime(timezone=True), nullable=False),
        sa.Column("sample_json", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("bucket"),
    )


def downgrade() -> None:
    op.drop_table("fleet_samples")
