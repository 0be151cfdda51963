"""What the scaler learned per model (its keep-alive per level, its pre-warms), published for the API

Revision ID: 0008_model_foresight
Revises: 0007_peer_weights
Create Date: 2026-12-03 14:40:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008_model_foresight"
down_revision = "0007_peer_weights"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("models", schema=None) as batch_op:
        batch_op.add_column(sa.Column("foresight_json", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("models", schema=None) as batch_op:
        batch_op.drop_column("foresight_json")
