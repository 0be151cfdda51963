"""The audit log by time: an index on audit_log.at for the audit page's since/until windows

Without it a window over a long log reads every row; with it, only the rows in the window.

Revision ID: 0009_audit_log_at
Revises: 0008_model_foresight
Create Date: 2026-12-04 10:00:00
"""

from __future__ import annotations

from alembic import op

revision = "0009_audit_log_at"
down_revision = "0008_model_foresight"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("audit_log", schema=None) as batch_op:
        batch_op.create_index("ix_audit_log_at", ["at"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("audit_log", schema=None) as batch_op:
        batch_op.drop_index("ix_audit_log_at")
