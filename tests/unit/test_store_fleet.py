"""The fleet store on a real SQLite file: registration, heartbeats, the reaper, draining."""

from __future__ import annotations

from datetime import timedelta

import pytest

from orchestrator.store import NodeConflict, NodeNotFound, NodeSecretRefused, Store
from orchestrator.store.tables import utcnow
from sdk import InvalidSpec
from sdk.wire.fleet import NodeHeartbeat, NodeSpec

pytestmark = pytest.mark.postgresql  # the store's SQL must mean the same on SQLite and PostgreSQL

SECRET = "s3cret-of-gpu-1"


def spec(node_id: str = "gpu-1", gpus: int = 2, **fields: object) -> NodeSpec:
    return NodeSpec.model_validate(
        {
            "node_id": node_id,
            "datacenter": "us-east",
            "zone": "us-east-1a",
            "capacity": "spot",
            "usd_per_hour": 5.98,
            "labels": {"dedicated": "tenant-a"},
            "disk_bandwidth_gbps": 3.5,
            "weights_cache_capacity_bytes": 2 * 10**12,
            "gpus": [
                {"index": i, "uuid": f"GPU-{node_id}-{i}", "type_name": "H100-80GB", "memory_total_mib": 81559}
                for i in range(gpus)
            ],
            **fields,
        }
    )


def beat(node_id: str = "gpu-1", **fields: object) -> NodeHeartbeat:
    return NodeHeartbeat.model_validate(
        {
            "node_id": node_id,
            "gpus": [
                {"index": 0, "memory_used_mib": 40_000, "utilization_pct": 73, "ecc_errors": 0},
                {"index": 1, "memory_used_mib": 0, "utilization_pct": 0, "ecc_errors": 0},
            ],
            "cached_weights": [{"model": "llama-3.1-8b", "size_bytes": 16 * 2**30}],
            "replicas": [
                {
                    "replica_id": "r-1",
                    "model": "llama-3.1-8b",
                    "gpu_indexes": [0],
                    "state": "warm",
                    "outstanding_tokens": 1200,
                    "active_leases": 3,
                }
            ],
            **fields,
        }
    )


def test_a_registered_node_is_healthy_and_keeps_its_spec(store: Store) -> None:
    view = store.fleet.register(spec(), SECRET)
    assert view.status == "healthy" and view.last_heartbeat_at is None
    assert [g.type_name for g in view.gpus] == ["H100-80GB", "H100-80GB"]
    # Its own trust label is its word alone (issue 34): only an operator's dedicates it.
    assert view.labels == {} and view.capacity == "spot"
    assert store.fleet.get("gpu-1") == view
    assert store.fleet.set_trust("gpu-1", {"dedicated": "tenant-b"}).labels == {"dedicated": "tenant-b"}
    assert [n.node_id for n in store.fleet.list()] == ["gpu-1"]


def test_registering_again_with_the_same_secret_is_idempotent(store: Store) -> None:
    first = store.fleet.register(spec(), SECRET)
    store.fleet.heartbeat(beat(), SECRET)
    again = store.fleet.register(spec(usd_per_hour=4.0), SECRET)
    assert again.registered_at == first.registered_at and again.usd_per_hour == 4.0
    assert again.gpus[0].memory_used_mib == 40_000  # metrics of GPUs still present survive
    assert len(store.fleet.list()) == 1


def test_a_reused_node_id_with_another_secret_is_refused_and_changes_nothing(store: Store) -> None:
    store.fleet.register(spec(), SECRET)
    with pytest.raises(NodeConflict) as refused:
        store.fleet.register(spec(datacenter="eu-west"), "another-secret")
    assert refused.value.field == "node_id"
    assert store.fleet.get("gpu-1").datacenter == "us-east"


def test_a_gpu_leaving_the_node_takes_its_replicas(store: Store) -> None:
    store.fleet.register(spec(), SECRET)
    store.fleet.heartbeat(beat(), SECRET)
    view = store.fleet.register(spec(gpus=1), SECRET)
    assert [g.index for g in view.gpus] == [0] and view.replicas == []


def test_a_heartbeat_replaces_metrics_caches_and_replicas(store: Store) -> None:
    store.fleet.register(spec(), SECRET)
    view = store.fleet.heartbeat(beat(), SECRET)
    assert view.last_heartbeat_at is not None
    assert view.gpus[0].utilization_pct == 73 and view.cached_weights[0].model == "llama-3.1-8b"
    assert [(r.model, r.gpu_indexes, r.state, r.outstanding_tokens) for r in view.replicas] == [
        ("llama-3.1-8b", [0], "warm", 1200)
    ]
    later = store.fleet.heartbeat(
        beat(
            replicas=[{"replica_id": "r-2", "model": "qwen-7b", "gpu_indexes": [1], "state": "loading"}],
            cached_weights=[],
        ),
        SECRET,
    )
    assert [r.model for r in later.replicas] == ["qwen-7b"] and later.cached_weights == []
    assert [r.node_id for r in store.fleet.replicas("qwen-7b")] == ["gpu-1"]
    assert store.fleet.replicas("llama-3.1-8b") == []
    assert store.fleet.replicas()[0].zone == "us-east-1a"


def test_an_unhealthy_gpu_makes_the_node_unhealthy(store: Store) -> None:
    store.fleet.register(spec(), SECRET)
    sick = beat(gpus=[{"index": 1, "healthy": False, "reason": "XID 79: fell off the bus"}])
    view = store.fleet.heartbeat(sick, SECRET)
    assert view.status == "unhealthy" and view.gpus[1].reason.startswith("XID 79")
    assert store.fleet.heartbeat(beat(), SECRET).status == "healthy"


def test_heartbeats_of_unknown_nodes_wrong_secrets_and_unknown_gpus_are_refused(store: Store) -> None:
    with pytest.raises(NodeSecretRefused):  # an unknown id is refused as a wrong secret: ids stay unmapped
        store.fleet.heartbeat(beat("ghost"), SECRET)
    store.fleet.register(spec(), SECRET)
    with pytest.raises(NodeSecretRefused):
        store.fleet.heartbeat(beat(), "guess")
    with pytest.raises(NodeSecretRefused):
        store.fleet.heartbeat(beat(), None)
    with pytest.raises(InvalidSpec) as bad:
        store.fleet.heartbeat(
            beat(replicas=[{"replica_id": "r-9", "model": "m", "gpu_indexes": [0, 7], "state": "warm"}]), SECRET
        )
    assert bad.value.field == "replicas.0.gpu_indexes"
    with pytest.raises(InvalidSpec) as bad:
        store.fleet.heartbeat(beat(gpus=[{"index": 9}]), SECRET)
    assert bad.value.field == "gpus.0.index"
    untouched = store.fleet.get("gpu-1")
    assert untouched.last_heartbeat_at is None and untouched.replicas == []


def test_nodes_silent_too_long_are_lost_and_lose_their_replicas(store: Store) -> None:
    store.fleet.register(spec("gpu-1"), SECRET)
    store.fleet.register(spec("gpu-2"), "other")
    store.fleet.heartbeat(beat("gpu-1"), SECRET)
    store.fleet.heartbeat(beat("gpu-2"), "other")
    assert store.fleet.mark_lost_after(30) == []
    later = utcnow() + timedelta(seconds=31)
    assert store.fleet.mark_lost_after(30, now=later) == ["gpu-1", "gpu-2"]
    assert store.fleet.mark_lost_after(30, now=later) == []  # already lost: reported once
    lost = store.fleet.get("gpu-1")
    assert lost.status == "lost" and lost.replicas == [] and lost.cached_weights  # the disk cache stays
    assert store.fleet.replicas() == []
    assert [n.node_id for n in store.fleet.list(status="lost")] == ["gpu-1", "gpu-2"]
    back = store.fleet.heartbeat(beat("gpu-1"), SECRET)
    assert back.status == "healthy" and len(back.replicas) == 1


def test_silence_counts_only_while_a_heartbeat_listener_was_up_to_hear_it(store: Store) -> None:
    store.fleet.register(spec("gpu-1"), SECRET)
    store.fleet.heartbeat(beat("gpu-1"), SECRET)
    heard_at = utcnow()
    # The API that took that beat dies 5 s later; the node's beats meet a closed port from then on.
    store.heartbeat_listeners.beat("api-1", since=heard_at - timedelta(hours=1), now=heard_at + timedelta(seconds=5))
    down_a_minute = heard_at + timedelta(seconds=60)
    assert store.fleet.mark_lost_after(30, now=down_a_minute) == []  # silent 60 s, but only 5 s of it heard
    # A restarted API listens from its start: the node's old silence is not held against it either.
    store.heartbeat_listeners.beat("api-2", since=down_a_minute, now=down_a_minute + timedelta(seconds=20))
    assert store.fleet.mark_lost_after(30, now=down_a_minute + timedelta(seconds=20)) == []
    # Silent through 30 s of that API's listening: now it is lost.
    store.heartbeat_listeners.beat("api-2", since=down_a_minute, now=down_a_minute + timedelta(seconds=31))
    assert store.fleet.mark_lost_after(30, now=down_a_minute + timedelta(seconds=31)) == ["gpu-1"]


def test_a_node_heard_by_one_listener_is_judged_by_the_one_that_listened_longest(store: Store) -> None:
    store.fleet.register(spec("gpu-1"), SECRET)
    store.fleet.heartbeat(beat("gpu-1"), SECRET)
    later = utcnow() + timedelta(seconds=31)
    store.heartbeat_listeners.beat("api-new", since=later - timedelta(seconds=1), now=later)
    assert store.fleet.mark_lost_after(30, now=later) == []  # the only listener just started
    store.heartbeat_listeners.beat("api-old", since=later - timedelta(hours=1), now=later)
    assert store.fleet.mark_lost_after(30, now=later) == ["gpu-1"]  # the other one was there all along


def test_drain_and_undrain(store: Store) -> None:
    store.fleet.register(spec(), SECRET)
    assert store.fleet.drain("gpu-1").status == "draining"
    assert store.fleet.heartbeat(beat(), SECRET).status == "draining"  # heartbeats do not undo an operator
    assert [n.node_id for n in store.fleet.list(status="draining")] == ["gpu-1"]
    assert store.fleet.undrain("gpu-1").status == "healthy"
    with pytest.raises(NodeNotFound):
        store.fleet.drain("ghost")


def test_the_fleet_survives_reopening_the_database(db_url: str) -> None:
    first = Store.open(db_url)
    first.fleet.register(spec(), SECRET)
    first.fleet.heartbeat(beat(), SECRET)
    first.close()
    again = Store.open(db_url)
    try:
        assert again.fleet.get("gpu-1").replicas[0].active_leases == 3
        assert again.fleet.list(datacenter="eu-west") == []
    finally:
        again.close()


def test_repeated_gpu_indexes_are_refused_by_the_contract() -> None:
    with pytest.raises(ValueError, match="index 0 is listed more than once"):
        NodeSpec.model_validate({**spec(gpus=1).model_dump(), "gpus": [{"index": 0, "type_name": "L4-24GB"}] * 2})


def test_a_node_that_says_it_is_leaving_drains_until_it_registers_again(store: Store) -> None:
    store.fleet.register(spec(), SECRET)
    assert store.fleet.heartbeat(beat(leaving=True), SECRET).status == "draining"
    assert store.fleet.heartbeat(beat(), SECRET).status == "draining"  # still going: nothing new lands there
    assert store.fleet.undrain("gpu-1").status == "draining"  # an operator's undrain does not stop a shutdown
    assert store.fleet.register(spec(), SECRET).status == "healthy"  # restarted: back in service
