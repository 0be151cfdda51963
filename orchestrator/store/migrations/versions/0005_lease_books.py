"""Leases carry what their step may spend and what was reserved for its call: a node's books are bounded by them

Leases from before this revision carry no limits (the empty default): a node books nothing under
them, and their steps are placed again.

Revision ID: 0005_lease_books
Revises: 0004_node_admission
Create Date: 2026-12-01 22:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005_lease_books"
down_revision = "0004_node_admission"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("leases", schema=None) as batch_op:
        batch_op.add_column(sa.Column("limits_json", sa.Text(), nullable=False, server_default=""))
        batch_op.add_column(sa.Column("reservation_json", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("leases", schema=None) as batch_op:
        batch_op.drop_column("reservation_json")
        batch_op.drop_column("limits_json")
