"""Heartbeat listeners: the control-plane API processes that take node heartbeats, since when and until when

A node's silence is evidence of its loss only while one of them was up to hear it; before this revision
the clock alone decided, and a restarted API had the whole fleet marked lost.

Revision ID: 0006_heartbeat_listeners
Revises: 0005_lease_books
Create Date: 2026-12-01 23:50:00
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

import orchestrator.store.tables

revision = "0006_heartbeat_listeners"
down_revision = "0005_lease_books"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "heartbeat_listeners",
        sa.Column("listener_id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("since", orchestrator.store.tables.UtcDateTime(timezone=True), nullable=False),
        sa.Column("alive_at", orchestrator.store.tables.UtcDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("listener_id"),
    )


def downgrade() -> None:
    op.drop_table("heartbeat_listeners")
