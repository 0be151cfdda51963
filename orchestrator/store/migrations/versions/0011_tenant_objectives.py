"""A tenant's latency objectives: the settings its tasks' objectives start from, over their class's defaults

One nullable text column on tenants (sdk.LatencyObjectives as JSON, only the fields set): existing tenants set
none, and their tasks keep their class's defaults. A task's own objectives travel in its spec and state, and an
agent's in its spec, both JSON columns already.

Revision ID: 0011_tenant_objectives
Revises: 0010_stuck_tasks
Create Date: 2026-12-06 10:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011_tenant_objectives"
down_revision = "0010_stuck_tasks"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tenants", schema=None) as batch_op:
        batch_op.add_column(sa.Column("objectives_json", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tenants", schema=None) as batch_op:
        batch_op.drop_column("objectives_json")
