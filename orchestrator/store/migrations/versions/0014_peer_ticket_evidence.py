"""What a peer ticket's source was asked to serve, and whether its report counted (issue 34)

Two columns on peer_tickets: a report against a source counts only on what the control plane saw under the
ticket (the source's own checks of the files it was asked for), and a reporter whose reports do not count or are
refuted loses the right to report. Tickets minted before this revision have no record of their checks, so a failure
reported under one counts for nothing (they live an hour at most).

Revision ID: 0014_peer_ticket_evidence
Revises: 0013_step_attempts
Create Date: 2026-12-06 08:45:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014_peer_ticket_evidence"
down_revision = "0013_step_attempts"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("peer_tickets") as batch:
        batch.add_column(sa.Column("served_json", sa.Text(), nullable=True))
        batch.add_column(sa.Column("evidenced", sa.Boolean(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("peer_tickets") as batch:
        batch.drop_column("evidenced")
        batch.drop_column("served_json")
