"""Weights between peers: where each node serves its cache, the tickets for peer copies, the copies that failed
their hash, and the measured transfers the pool learns its bandwidths from

Nodes from before this revision serve no peer until their next heartbeat names a port (the columns are null).

Revision ID: 0007_peer_weights
Revises: 0006_heartbeat_listeners
Create Date: 2026-12-02 01:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

import orchestrator.store.tables

revision = "0007_peer_weights"
down_revision = "0006_heartbeat_listeners"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.add_column(sa.Column("peer_host", sqlmodel.sql.sqltypes.AutoString(), nullable=True))
        batch_op.add_column(sa.Column("peer_port", orchestrator.store.tables.Int64, nullable=True))

    op.create_table(
        "peer_tickets",
        sa.Column("ticket_sha256", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("source_node", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("dest_node", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("model", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("files_json", sa.Text(), nullable=False),
        sa.Column("created_at", orchestrator.store.tables.UtcDateTime(timezone=True), nullable=False),
        sa.Column("expires_at", orchestrator.store.tables.UtcDateTime(timezone=True), nullable=False),
        sa.Column("closed_at", orchestrator.store.tables.UtcDateTime(timezone=True), nullable=True),
        sa.Column("outcome", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
        sa.PrimaryKeyConstraint("ticket_sha256"),
    )
    with op.batch_alter_table("peer_tickets", schema=None) as batch_op:
        batch_op.create_index("ix_peer_tickets_created", ["created_at"], unique=False)

    op.create_table(
        "peer_disputes",
        sa.Column("id", orchestrator.store.tables.Int64, nullable=False),
        sa.Column("node_id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("model", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("reported_by", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("outcome", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("reason", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
        sa.Column("at", orchestrator.store.tables.UtcDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("peer_disputes", schema=None) as batch_op:
        batch_op.create_index("ix_peer_disputes_node_model", ["node_id", "model"], unique=False)
        batch_op.create_index("ix_peer_disputes_at", ["at"], unique=False)

    op.create_table(
        "transfer_samples",
        sa.Column("id", orchestrator.store.tables.Int64, nullable=False),
        sa.Column("node_id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("tier", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("source_node", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
        sa.Column("bytes", orchestrator.store.tables.Int64, nullable=False),
        sa.Column("seconds", sa.Float(), nullable=False),
        sa.Column("at", orchestrator.store.tables.UtcDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("transfer_samples", schema=None) as batch_op:
        batch_op.create_index("ix_transfer_samples_at", ["at"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("transfer_samples", schema=None) as batch_op:
        batch_op.drop_index("ix_transfer_samples_at")
    op.drop_table("transfer_samples")
    with op.batch_alter_table("peer_disputes", schema=None) as batch_op:
        batch_op.drop_index("ix_peer_disputes_at")
        batch_op.drop_index("ix_peer_disputes_node_model")
    op.drop_table("peer_disputes")
    with op.batch_alter_table("peer_tickets", schema=None) as batch_op:
        batch_op.drop_index("ix_peer_tickets_created")
    op.drop_table("peer_tickets")
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.drop_column("peer_port")
        batch_op.drop_column("peer_host")
