"""Baseline: the schema as Berth 0.1 created it with create_all, before migrations

Revision ID: 0001
Revises:
Create Date: 2026-11-30 11:37:50.598801
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

import orchestrator.store.tables

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "agents",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("version", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("spec_json", sa.Text(), nullable=False),
        sa.Column("registered_at", orchestrator.store.tables.UtcDateTime(timezone=True), nullable=False),
        sa.Column("activated_at", orchestrator.store.tables.UtcDateTime(timezone=True), nullable=False),
        sa.Column("tenant", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("name", "version", name="uq_agents_name_version"),
    )
    with op.batch_alter_table("agents", schema=None) as batch_op:
        batch_op.create_index("ix_agents_name_activated", ["name", "activated_at"], unique=False)

    op.create_table(
        "api_keys",
        sa.Column("key_id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("secret_sha256", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("role", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("tenant", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
        sa.Column("name", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("description", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("created_at", orchestrator.store.tables.UtcDateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", orchestrator.store.tables.UtcDateTime(timezone=True), nullable=True),
        sa.Column("last_used_at", orchestrator.store.tables.UtcDateTime(timezone=True), nullable=True),
        sa.Column("task_id", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
        sa.PrimaryKeyConstraint("key_id"),
    )
    op.create_table(
        "audit_log",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("at", orchestrator.store.tables.UtcDateTime(timezone=True), nullable=False),
        sa.Column("key_id", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
        sa.Column("role", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
        sa.Column("tenant", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
        sa.Column("method", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("path", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("target", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
        sa.Column("status", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sqlite_autoincrement=True,
    )
    with op.batch_alter_table("audit_log", schema=None) as batch_op:
        batch_op.create_index("ix_audit_log_key", ["key_id", "id"], unique=False)

    op.create_table(
        "checkpoints",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("task_id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("parent_hash", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("hash", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("message_count", sa.Integer(), nullable=False),
        sa.Column("encoding", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("delta", sa.LargeBinary(), nullable=False),
        sa.Column("delta_bytes", sa.Integer(), nullable=False),
        sa.Column("created_at", orchestrator.store.tables.UtcDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("task_id", "seq", name="uq_checkpoints_task_seq"),
    )
    op.create_table(
        "leases",
        sa.Column("lease_id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("task_id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("model", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("node_id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("replica_id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("tokens", sa.Integer(), nullable=False),
        sa.Column("tenant", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("created_replica", sa.Boolean(), nullable=False),
        sa.Column("created_at", orchestrator.store.tables.UtcDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("lease_id"),
        sa.UniqueConstraint("task_id", "step", name="uq_leases_task_step"),
    )
    with op.batch_alter_table("leases", schema=None) as batch_op:
        batch_op.create_index("ix_leases_node", ["node_id"], unique=False)

    op.create_table(
        "models",
        sa.Column("name", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("entry_json", sa.Text(), nullable=False),
        sa.Column("policy_json", sa.Text(), nullable=False),
        sa.Column("updated_at", orchestrator.store.tables.UtcDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )
    op.create_table(
        "node_gpus",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("node_id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("gpu_index", sa.Integer(), nullable=False),
        sa.Column("type_name", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("description_json", sa.Text(), nullable=False),
        sa.Column("memory_used_mib", sa.Integer(), nullable=True),
        sa.Column("utilization_pct", sa.Integer(), nullable=True),
        sa.Column("ecc_errors", sa.Integer(), nullable=True),
        sa.Column("healthy", sa.Boolean(), nullable=False),
        sa.Column("reason", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("node_id", "gpu_index", name="uq_node_gpus_node_index"),
    )
    op.create_table(
        "node_weights",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("node_id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("model", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("size_bytes", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("node_id", "model", name="uq_node_weights_node_model"),
    )
    with op.batch_alter_table("node_weights", schema=None) as batch_op:
        batch_op.create_index("ix_node_weights_model", ["model"], unique=False)

    op.create_table(
        "nodes",
        sa.Column("node_id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("status", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("datacenter", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("spec_json", sa.Text(), nullable=False),
        sa.Column("secret_sha256", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("draining", sa.Boolean(), nullable=False),
        sa.Column("leaving", sa.Boolean(), nullable=False),
        sa.Column("preempt_by", orchestrator.store.tables.UtcDateTime(timezone=True), nullable=True),
        sa.Column("lost", sa.Boolean(), nullable=False),
        sa.Column("registered_at", orchestrator.store.tables.UtcDateTime(timezone=True), nullable=False),
        sa.Column("seen_at", orchestrator.store.tables.UtcDateTime(timezone=True), nullable=False),
        sa.Column("last_heartbeat_at", orchestrator.store.tables.UtcDateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("node_id"),
    )
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.create_index("ix_nodes_datacenter", ["datacenter"], unique=False)
        batch_op.create_index("ix_nodes_seen", ["seen_at"], unique=False)
        batch_op.create_index("ix_nodes_status", ["status"], unique=False)

    op.create_table(
        "replicas",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("node_id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("replica_id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("model", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("gpu_indexes_json", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("state", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("outstanding_tokens", sa.Integer(), nullable=False),
        sa.Column("active_leases", sa.Integer(), nullable=False),
        sa.Column("updated_at", orchestrator.store.tables.UtcDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("replicas", schema=None) as batch_op:
        batch_op.create_index("ix_replicas_model", ["model"], unique=False)
        batch_op.create_index("ix_replicas_node", ["node_id"], unique=False)

    op.create_table(
        "task_events",
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("task_id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("kind", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("at", orchestrator.store.tables.UtcDateTime(timezone=True), nullable=False),
        sa.Column("data_json", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("seq"),
        sqlite_autoincrement=True,
    )
    with op.batch_alter_table("task_events", schema=None) as batch_op:
        batch_op.create_index("ix_task_events_kind_at", ["kind", "at"], unique=False)
        batch_op.create_index("ix_task_events_task_seq", ["task_id", "seq"], unique=False)

    op.create_table(
        "tasks",
        sa.Column("task_id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("status", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("tenant", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("agent", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("model", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("parent_task_id", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
        sa.Column("spec_json", sa.Text(), nullable=True),
        sa.Column("state_json", sa.Text(), nullable=False),
        sa.Column("created_at", orchestrator.store.tables.UtcDateTime(timezone=True), nullable=False),
        sa.Column("updated_at", orchestrator.store.tables.UtcDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("task_id"),
    )
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.create_index("ix_tasks_agent_created", ["agent", "created_at"], unique=False)
        batch_op.create_index("ix_tasks_created", ["created_at"], unique=False)
        batch_op.create_index("ix_tasks_parent_created", ["parent_task_id", "created_at"], unique=False)
        batch_op.create_index("ix_tasks_status_created", ["status", "created_at"], unique=False)
        batch_op.create_index("ix_tasks_tenant_created", ["tenant", "created_at"], unique=False)
        batch_op.create_index("ix_tasks_updated", ["updated_at"], unique=False)

    op.create_table(
        "tenants",
        sa.Column("name", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("trust", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("gpu_quota", sa.Integer(), nullable=True),
        sa.Column("default_budget_tokens", sa.Integer(), nullable=True),
        sa.Column("default_budget_usd", sa.Float(), nullable=True),
        sa.Column("created_at", orchestrator.store.tables.UtcDateTime(timezone=True), nullable=False),
        sa.Column("updated_at", orchestrator.store.tables.UtcDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )
    op.create_table(
        "token_ledger",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("task_id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("kind", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("model", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("prompt_tokens", sa.Integer(), nullable=False),
        sa.Column("completion_tokens", sa.Integer(), nullable=False),
        sa.Column("cost_usd", sa.Float(), nullable=False),
        sa.Column("ttft_s", sa.Float(), nullable=False),
        sa.Column("duration_s", sa.Float(), nullable=False),
        sa.Column("served_by", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("response_id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("created_at", orchestrator.store.tables.UtcDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("task_id", "step", "attempt", "kind", name="uq_ledger_call"),
    )
    op.create_table(
        "ui_sessions",
        sa.Column("session_sha256", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("key_id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("csrf_token", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("created_at", orchestrator.store.tables.UtcDateTime(timezone=True), nullable=False),
        sa.Column("expires_at", orchestrator.store.tables.UtcDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("session_sha256"),
    )
    with op.batch_alter_table("ui_sessions", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_ui_sessions_key_id"), ["key_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("ui_sessions", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_ui_sessions_key_id"))

    op.drop_table("ui_sessions")
    op.drop_table("token_ledger")
    op.drop_table("tenants")
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.drop_index("ix_tasks_updated")
        batch_op.drop_index("ix_tasks_tenant_created")
        batch_op.drop_index("ix_tasks_status_created")
        batch_op.drop_index("ix_tasks_parent_created")
        batch_op.drop_index("ix_tasks_created")
        batch_op.drop_index("ix_tasks_agent_created")

    op.drop_table("tasks")
    with op.batch_alter_table("task_events", schema=None) as batch_op:
        batch_op.drop_index("ix_task_events_task_seq")
        batch_op.drop_index("ix_task_events_kind_at")

    op.drop_table("task_events")
    with op.batch_alter_table("replicas", schema=None) as batch_op:
        batch_op.drop_index("ix_replicas_node")
        batch_op.drop_index("ix_replicas_model")

    op.drop_table("replicas")
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.drop_index("ix_nodes_status")
        batch_op.drop_index("ix_nodes_seen")
        batch_op.drop_index("ix_nodes_datacenter")

    op.drop_table("nodes")
    with op.batch_alter_table("node_weights", schema=None) as batch_op:
        batch_op.drop_index("ix_node_weights_model")

    op.drop_table("node_weights")
    op.drop_table("node_gpus")
    op.drop_table("models")
    with op.batch_alter_table("leases", schema=None) as batch_op:
        batch_op.drop_index("ix_leases_node")

    op.drop_table("leases")
    op.drop_table("checkpoints")
    with op.batch_alter_table("audit_log", schema=None) as batch_op:
        batch_op.drop_index("ix_audit_log_key")

    op.drop_table("audit_log")
    op.drop_table("api_keys")
    with op.batch_alter_table("agents", schema=None) as batch_op:
        batch_op.drop_index("ix_agents_name_activated")

    op.drop_table("agents")
