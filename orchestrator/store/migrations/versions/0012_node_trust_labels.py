"""A node's trust labels, as an operator set them: the only ones placement reads (issue 34)

One text column on nodes, JSON, "{}" by default. A `dedicated=<tenant>` label a node registered itself used to
make it that tenant's, so any admitted machine could ask to be sent one tenant's conversations; such labels now
stay in the node's spec, unread for trust. Existing nodes start with none: an operator dedicates them again
(`PUT /v1/nodes/{node_id}/trust`).

Revision ID: 0012_node_trust_labels
Revises: 0011_tenant_objectives
Create Date: 2026-12-06 08:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

revision = "0012_node_trust_labels"
down_revision = "0011_tenant_objectives"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("trust_labels_json", sqlmodel.sql.sqltypes.AutoString(), nullable=False, server_default="{}")
        )


def downgrade() -> None:
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.drop_column("trust_labels_json")
