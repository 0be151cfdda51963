"""A task's stuck workflow: the reconciler's finding that Temporal cannot run the task's workflow code

Two nullable columns on tasks (what was found, and since when, indexed for the stuck-task gauge): existing rows
read as not stuck.

Revision ID: 0010_stuck_tasks
Revises: 0009_audit_log_at
Create Date: 2026-12-05 22:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import orchestrator.store.tables

revision = "0010_stuck_tasks"
down_revision = "0009_audit_log_at"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.add_column(sa.Column("stuck_json", sa.Text(), nullable=True))
        batch_op.add_column(
            sa.Column("stuck_since", orchestrator.store.tables.UtcDateTime(timezone=True), nullable=True)
        )
        batch_op.create_index("ix_tasks_stuck_since", ["stuck_since"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.drop_index("ix_tasks_stuck_since")
        batch_op.drop_column("stuck_since")
        batch_op.drop_column("stuck_json")
