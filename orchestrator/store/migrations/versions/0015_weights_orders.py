"""Operators' pre-warms, recorded: a node is minted peer tickets only for a load placed on it (issue 34)

A new table: a pool's placed load is its GPU reservation (gpu_reservations); an operator's pre-warm places
weights with no replica, so it is kept here, for as long as its copy may take. Pre-warms started before this
revision copy from origin if they ask for a peer ticket.

Revision ID: 0015_weights_orders
Revises: 0014_peer_ticket_evidence
Create Date: 2026-12-06 08:55:00
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

import orchestrator.store.tables

revision = "0015_weights_orders"
down_revision = "0014_peer_ticket_evidence"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "weights_orders",
        sa.Column("id", orchestrator.store.tables.Int64, nullable=False),
        sa.Column("node_id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("model", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("until", orchestrator.store.tables.UtcDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_weights_orders_node_model", "weights_orders", ["node_id", "model"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_weights_orders_node_model", table_name="weights_orders")
    op.drop_table("weights_orders")
