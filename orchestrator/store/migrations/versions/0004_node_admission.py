"""Node admission: per-node join tokens, and whether a node is admitted, pending approval or revoked

Every node registered before this revision joined with the cluster token when that alone let a node
in, so existing rows are admitted (the column's server default).

Revision ID: 0004_node_admission
Revises: 0003
Create Date: 2026-12-01 21:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

import orchestrator.store.tables

revision = "0004_node_admission"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "node_join_tokens",
        sa.Column("token_sha256", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("node_id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("created_by", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
        sa.Column("created_at", orchestrator.store.tables.UtcDateTime(timezone=True), nullable=False),
        sa.Column("expires_at", orchestrator.store.tables.UtcDateTime(timezone=True), nullable=False),
        sa.Column("used_at", orchestrator.store.tables.UtcDateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("token_sha256"),
    )
    with op.batch_alter_table("node_join_tokens", schema=None) as batch_op:
        batch_op.create_index("ix_node_join_tokens_node", ["node_id"], unique=False)

    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("admission", sqlmodel.sql.sqltypes.AutoString(), nullable=False, server_default="admitted")
        )


def downgrade() -> None:
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.drop_column("admission")

    with op.batch_alter_table("node_join_tokens", schema=None) as batch_op:
        batch_op.drop_index("ix_node_join_tokens_node")

    op.drop_table("node_join_tokens")
