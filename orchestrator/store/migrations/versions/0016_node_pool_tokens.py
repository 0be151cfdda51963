"""Pool tokens: the GPU nodes of an autoscaled pool join without a person (issue 35)

A new table of pool tokens (their sha256, pool, cap, places taken, trust labels, expiry, revocation), and on
each node the pool it joined and the token whose place it holds. Nodes from before this revision are in no pool.

Revision ID: 0016_node_pool_tokens
Revises: 0015_weights_orders
Create Date: 2026-12-06 10:20:00
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

import orchestrator.store.tables

revision = "0016_node_pool_tokens"
down_revision = "0015_weights_orders"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "node_pool_tokens",
        sa.Column("token_id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("token_sha256", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("pool", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("max_nodes", orchestrator.store.tables.Int64, nullable=False),
        sa.Column("nodes", orchestrator.store.tables.Int64, nullable=False),
        sa.Column("trust_labels_json", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("created_by", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
        sa.Column("created_at", orchestrator.store.tables.UtcDateTime(timezone=True), nullable=False),
        sa.Column("expires_at", orchestrator.store.tables.UtcDateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", orchestrator.store.tables.UtcDateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("token_id"),
        sa.UniqueConstraint("token_sha256", name="uq_node_pool_tokens_sha256"),
    )
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.add_column(sa.Column("pool", sqlmodel.sql.sqltypes.AutoString(), nullable=True))
        batch_op.add_column(sa.Column("pool_token_id", sqlmodel.sql.sqltypes.AutoString(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.drop_column("pool_token_id")
        batch_op.drop_column("pool")
    op.drop_table("node_pool_tokens")
