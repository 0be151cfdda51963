"""PostgreSQL: every integer column is BIGINT, as the API's bounds (sdk.wire.limits.MAX_STORED_INT) assume

A node's weights size (16 GiB and more) overflowed PostgreSQL's 32-bit INTEGER, and so would any
sequence number, row id or counter past 2^31. SQLite's INTEGER is 64-bit already: nothing to do there.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30 12:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

# The integer columns of the baseline, frozen here: later revisions may add or drop some.
COLUMNS = {
    "agents": ["id"],
    "audit_log": ["id", "status"],
    "checkpoints": ["id", "seq", "step", "message_count", "delta_bytes"],
    "leases": ["step", "tokens"],
    "node_gpus": ["id", "gpu_index", "memory_used_mib", "utilization_pct", "ecc_errors"],
    "node_weights": ["id", "size_bytes"],
    "replicas": ["id", "outstanding_tokens", "active_leases"],
    "task_events": ["seq"],
    "tenants": ["gpu_quota", "default_budget_tokens"],
    "token_ledger": ["id", "step", "attempt", "prompt_tokens", "completion_tokens"],
}


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for table, columns in COLUMNS.items():
        for column in columns:
            op.alter_column(table, column, type_=sa.BigInteger(), existing_type=sa.Integer())
    # A SERIAL id's sequence is typed too: widen it with its column, or it stops at 2^31 - 1.
    for table, column in [
        ("agents", "id"),
        ("audit_log", "id"),
        ("checkpoints", "id"),
        ("node_gpus", "id"),
        ("node_weights", "id"),
        ("replicas", "id"),
        ("task_events", "seq"),
        ("token_ledger", "id"),
    ]:
        op.execute(f"ALTER SEQUENCE IF EXISTS {table}_{column}_seq AS BIGINT")


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for table, columns in COLUMNS.items():
        for column in columns:
            op.alter_column(table, column, type_=sa.Integer(), existing_type=sa.BigInteger())
