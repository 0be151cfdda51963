"""The control plane's alert gauges: heartbeat ages, tasks waiting for a GPU by trouble, tasks near budget."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from orchestrator.telemetry.task_gauges import task_reading
from sdk import Spend, TaskState, TaskStatus
from sdk.wire.fleet import NodeView

NOW = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)


def _node(node_id: str, status: str, heartbeat_s_ago: float | None) -> NodeView:
    return NodeView(
        node_id=node_id,
        datacenter="east",
        zone="east-1a",
        capacity="on-demand",
        usd_per_hour=2.0,
        disk_bandwidth_gbps=2.0,
        status=status,
        registered_at=NOW - timedelta(minutes=10),
        last_heartbeat_at=None if heartbeat_s_ago is None else NOW - timedelta(seconds=heartbeat_s_ago),
    )


def _task(task_id: str, tenant: str, status: TaskStatus, used: int, trouble: str | None = None) -> TaskState:
    return TaskState(
        task_id=task_id,
        agent="a",
        agent_version="v",
        model="m-1",
        tenant=tenant,
        status=status,
        max_steps=5,
        spend=Spend(token_limit=1000, tokens_used=used),
        gpu_trouble=trouble,
    )


def test_the_alert_gauges_read_what_the_store_knows() -> None:
    reading = task_reading(
        [_node("gpu-a", "healthy", 3), _node("gpu-b", "unhealthy", None), _node("gpu-c", "lost", 900)],
        [
            _task("w1", "acme", TaskStatus.waiting_for_gpu, 0, "crash_loop"),
            _task("w2", "acme", TaskStatus.waiting_for_gpu, 0, "crash_loop"),
            _task("w3", "x", TaskStatus.waiting_for_gpu, 0),
        ],
        [
            _task("r1", "acme", TaskStatus.running, 950),
            _task("r2", "acme", TaskStatus.running, 899),
            _task("r3", "globex", TaskStatus.running, 900),
        ],
        now=NOW,
    )
    assert reading.heartbeat_age_s == {("gpu-a", "east"): 3.0, ("gpu-b", "east"): 600.0}  # a lost node is no alert
    assert reading.gpu_trouble == {("m-1", "crash_loop"): 2, ("m-1", "capacity"): 1}
    assert reading.near_budget == {"acme": 1, "globex": 1}


def test_every_known_tenant_and_model_is_reported_at_zero_rather_than_vanishing() -> None:
    reading = task_reading(
        [],
        [_task("w1", "acme", TaskStatus.waiting_for_gpu, 0, "crash_loop")],
        [],
        now=NOW,
        stuck={"globex": 2},
        tenants=["default", "acme", "globex"],
        models=["m-1", "m-2"],
    )
    assert dict(reading.stuck) == {"default": 0, "acme": 0, "globex": 2}
    assert dict(reading.near_budget) == {"default": 0, "acme": 0, "globex": 0}
    assert dict(reading.gpu_trouble) == {
        ("m-1", "capacity"): 0,
        ("m-1", "preemption"): 0,
        ("m-1", "crash_loop"): 1,
        ("m-2", "capacity"): 0,
        ("m-2", "preemption"): 0,
        ("m-2", "crash_loop"): 0,
    }
