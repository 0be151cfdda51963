"""GPU reservations say when their node first listed the replica

A new nullable column, `gpu_reservations.reported_at`. A reservation counted against its GPUs for the whole
unreported-load grace even after its node had listed the replica and stopped listing it (a node restarted
within a minute of a load, or a replica a step saw fail): new loads there were refused though the GPU was free,
and a step waited out the grace. Reservations from before this revision have none and count as before.

Revision ID: 0018_reservations_reported
Revises: 0017_fleet_samples
Create Date: 2026-12-06 13:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import orchestrator.store.tables

revision = "0018_reservations_reported"
down_revision = "0017_fleet_samples"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("gpu_reservations") as batch:
        batch.add_column(sa.Column("reported_at", orchestrator.store.tables.UtcDateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("gpu_reservations") as batch:
        batch.drop_column("reported_at")
