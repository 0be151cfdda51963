"""Several control-plane replicas: GPU reservations checked across pools, leases by pool, a leader per job

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30 11:45:47.290023
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

import orchestrator.store.tables

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "gpu_reservations",
        sa.Column("replica_id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("node_id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("model", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("gpu_indexes_json", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("per_device_gib", sa.Float(), nullable=False),
        sa.Column("owner", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
        sa.Column("pool_id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("created_at", orchestrator.store.tables.UtcDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("replica_id"),
    )
    with op.batch_alter_table("gpu_reservations", schema=None) as batch_op:
        batch_op.create_index("ix_gpu_reservations_node", ["node_id"], unique=False)

    op.create_table(
        "leadership",
        sa.Column("job", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("holder", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("expires_at", orchestrator.store.tables.UtcDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("job"),
    )
    with op.batch_alter_table("leases", schema=None) as batch_op:
        batch_op.add_column(sa.Column("pool_id", sqlmodel.sql.sqltypes.AutoString(), nullable=False, server_default=""))


def downgrade() -> None:
    with op.batch_alter_table("leases", schema=None) as batch_op:
        batch_op.drop_column("pool_id")

    op.drop_table("leadership")
    with op.batch_alter_table("gpu_reservations", schema=None) as batch_op:
        batch_op.drop_index("ix_gpu_reservations_node")

    op.drop_table("gpu_reservations")
