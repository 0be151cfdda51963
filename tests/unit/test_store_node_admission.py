"""Who is in the fleet, on the store: per-node tokens, pending nodes, approval, revocation and removal.

The API's attacker tests (tests/security/test_node_admission.py) run on SQLite; these hold the same
rules on PostgreSQL too, where the conditional UPDATE that spends a token and the deletes of a removed
node must mean the same.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from datetime import timedelta

import pytest
from sqlalchemy import update
from sqlmodel import Session, col, select

from orchestrator.store import (
    JoinTokenRefused,
    LeaseRecord,
    NodeConflict,
    NodeNotApproved,
    NodeNotFound,
    NodeRevoked,
    NodeSecretRefused,
    PoolFull,
    PoolTokenRefused,
    Store,
)
from orchestrator.store.node_admission import TOKEN_PREFIX
from orchestrator.store.node_pools import POOL_NODE_GONE_S
from orchestrator.store.pending_nodes import PendingListFull, PendingRoom
from orchestrator.store.tables import NodeJoinTokenRow, NodeRow, utcnow
from sdk import Conflict
from sdk.wire.fleet import NodeHeartbeat, NodeSpec, NodeTrust
from sdk.wire.node_pools import PoolTokenRequest

pytestmark = pytest.mark.postgresql  # the store's SQL must mean the same on SQLite and PostgreSQL


def spec(node_id: str = "gpu-1") -> NodeSpec:
    return NodeSpec.model_validate(
        {
            "node_id": node_id,
            "datacenter": "dc1",
            "zone": "dc1-a",
            "gpus": [{"index": 0, "type_name": "H100-80GB", "memory_total_mib": 81559}],
        }
    )


def beat(node_id: str = "gpu-1") -> NodeHeartbeat:
    return NodeHeartbeat.model_validate(
        {
            "node_id": node_id,
            "gpus": [{"index": 0, "memory_used_mib": 1000}],
            "cached_weights": [{"model": "llama-3.1-8b", "size_bytes": 2**30}],
            "replicas": [{"replica_id": "r-1", "model": "llama-3.1-8b", "gpu_indexes": [0], "state": "warm"}],
        }
    )


def test_the_cluster_token_leaves_a_node_pending_until_an_operator_approves_it(store: Store) -> None:
    joined = store.node_admission.join(spec(), "chosen-by-the-node", "cluster", cluster_token=True)
    assert joined.created and joined.node.status == "pending" and joined.node_secret != "chosen-by-the-node"
    secret = joined.node_secret
    seen = store.fleet.heartbeat(beat(), secret)
    assert seen.status == "pending" and seen.gpus[0].memory_used_mib == 1000 and seen.replicas == []
    with pytest.raises(NodeNotApproved) as refused:
        store.fleet.authenticate("gpu-1", secret)
    assert refused.value.status_code == 403 and refused.value.field == "node_id"
    assert store.fleet.mark_lost_after(0, now=utcnow() + timedelta(hours=1)) == []  # pending is not lost
    again = store.node_admission.join(spec(), secret, "cluster", cluster_token=True)
    assert not again.created and again.node_secret == secret and again.node.status == "pending"
    assert store.node_admission.approve("gpu-1").status == "healthy"
    store.fleet.authenticate("gpu-1", secret)
    with pytest.raises(NodeConflict):  # another machine with the cluster token cannot take the id
        store.node_admission.join(spec(), None, "cluster", cluster_token=True)


def test_a_per_node_token_admits_its_node_once(store: Store) -> None:
    minted = store.node_admission.mint("gpu-1", 600, created_by="k-1")
    assert minted.join_token.startswith(TOKEN_PREFIX) and minted.node_id == "gpu-1"
    with Session(store.engine) as session:
        rows = session.exec(select(NodeJoinTokenRow)).all()
    assert [r.node_id for r in rows] == ["gpu-1"] and minted.join_token not in rows[0].token_sha256
    with pytest.raises(JoinTokenRefused, match="admits node 'gpu-1', not 'gpu-2'"):
        store.node_admission.join(spec("gpu-2"), None, minted.join_token, cluster_token=False)
    joined = store.node_admission.join(spec(), None, minted.join_token, cluster_token=False)
    assert joined.node.status == "healthy"
    with pytest.raises(JoinTokenRefused, match="used already"):  # another machine replaying it
        store.node_admission.join(spec(), None, minted.join_token, cluster_token=False)
    restarted = store.node_admission.join(spec(), joined.node_secret, minted.join_token, cluster_token=False)
    assert not restarted.created and restarted.node.status == "healthy"  # a restart proves itself by its secret
    with pytest.raises(NodeConflict):  # the id is held: the cluster token does not take it over
        store.node_admission.join(spec(), None, "cluster", cluster_token=True)
    with pytest.raises(Conflict, match="admitted already"):
        store.node_admission.mint("gpu-1", 600)


def test_an_expired_token_admits_nobody_and_expired_ones_are_cleared(store: Store) -> None:
    old = store.node_admission.mint("gpu-1", 60, now=utcnow() - timedelta(minutes=5))
    with pytest.raises(JoinTokenRefused, match="expired"):
        store.node_admission.join(spec(), None, old.join_token, cluster_token=False)
    store.node_admission.mint("gpu-2", 60)
    with Session(store.engine) as session:
        assert [r.node_id for r in session.exec(select(NodeJoinTokenRow)).all()] == ["gpu-2"]


def test_revocation_kills_the_secret_and_the_tokens_and_removal_forgets_the_node(store: Store) -> None:
    joined = store.node_admission.join(
        spec(), None, store.node_admission.mint("gpu-1", 600).join_token, cluster_token=False
    )
    store.fleet.heartbeat(beat(), joined.node_secret)
    store.leases.add(
        LeaseRecord(
            lease_id="l-1",
            task_id="t-1",
            step=1,
            model="llama-3.1-8b",
            node_id="gpu-1",
            replica_id="r-1",
            tokens=10,
            tenant="default",
        )
    )
    revoked = store.node_admission.revoke("gpu-1")
    assert revoked.status == "revoked" and revoked.replicas == []
    with pytest.raises(NodeRevoked):  # its own former secret is told so...
        store.fleet.authenticate("gpu-1", joined.node_secret)
    with pytest.raises(NodeRevoked):
        store.fleet.heartbeat(beat(), joined.node_secret)
    for presented in (None, "guess"):  # ...anyone else hears what an unknown id hears
        with pytest.raises(NodeSecretRefused):
            store.fleet.authenticate("gpu-1", presented)
        with pytest.raises(NodeSecretRefused):
            store.fleet.heartbeat(beat(), presented)
    assert store.fleet.mark_lost_after(0, now=utcnow() + timedelta(hours=1)) == []  # revoked is not lost
    with pytest.raises(Conflict, match="revoked"):
        store.node_admission.approve("gpu-1")

    store.node_admission.remove("gpu-1")
    assert store.fleet.get("gpu-1") is None and store.leases.list() == []
    with pytest.raises(NodeNotFound):
        store.node_admission.remove("gpu-1")
    again = store.node_admission.join(
        spec(), None, store.node_admission.mint("gpu-1", 600).join_token, cluster_token=False
    )
    assert again.created and again.node.status == "healthy" and again.node.cached_weights == []


def test_a_revoked_node_comes_back_only_as_a_new_admission(store: Store) -> None:
    joined = store.node_admission.join(spec(), None, "cluster", cluster_token=True)
    store.node_admission.approve("gpu-1")
    store.node_admission.revoke("gpu-1")
    with pytest.raises(JoinTokenRefused):
        store.node_admission.join(spec(), joined.node_secret, "not-a-token", cluster_token=False)
    back = store.node_admission.join(spec(), joined.node_secret, "cluster", cluster_token=True)
    assert back.created and back.node.status == "pending" and back.node_secret != joined.node_secret


def race(racers: int, join: Callable[[int], str]) -> Counter[str]:
    """`racers` threads released at once, each joining as `join(i)` does; how many ended each way it says."""
    start = threading.Barrier(racers)
    outcomes: list[str] = []

    def run(i: int) -> None:
        start.wait()
        outcomes.append(join(i))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(racers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return Counter(outcomes)


def test_a_pool_tokens_cap_holds_when_joins_race_and_a_removed_node_frees_its_place(store: Store) -> None:
    """The cap is one conditional UPDATE in the join's transaction: racing threads on SQLite (one writer at a
    time) and PostgreSQL (the UPDATE waits on the token row's lock, then reads the count again) get exactly it."""
    token = store.node_pools.create("gpu-a", PoolTokenRequest(max_nodes=3, trust=NodeTrust(dedicated="acme")))
    racers = 12

    def join(i: int) -> str:
        try:
            joined = store.node_admission.join(spec(f"race-{i}"), None, token.join_token, cluster_token=False)
            return f"in:{joined.node.pool}:{joined.node.labels.get('dedicated')}"
        except PoolFull as exc:
            return f"full:{exc.status_code}"

    assert race(racers, join) == {"in:gpu-a:acme": 3, "full:429": racers - 3}
    [listed] = store.node_pools.list()
    assert listed.nodes == 3 and listed.max_nodes == 3 and listed.labels == {"dedicated": "acme"}

    member = next(n.node_id for n in store.fleet.list() if n.pool == "gpu-a")
    store.node_admission.revoke(member)  # a revoked node keeps its place...
    with pytest.raises(PoolFull):
        store.node_admission.join(spec("late"), None, token.join_token, cluster_token=False)
    with pytest.raises(Conflict, match="revoked"):  # ...and its id is not the token's to hand out again
        store.node_admission.join(spec(member), None, token.join_token, cluster_token=False)
    store.node_admission.remove(member)  # removing it frees the place
    assert store.node_admission.join(spec("late"), None, token.join_token, cluster_token=False).node.pool == "gpu-a"
    store.node_pools.revoke(token.token_id)
    with pytest.raises(PoolTokenRefused, match="revoked"):
        store.node_admission.join(spec("later"), None, token.join_token, cluster_token=False)
    assert store.node_pools.list()[0].nodes == 3


def test_the_pending_lists_cap_holds_when_cluster_token_joins_race(store: Store) -> None:
    """A leaked cluster token's burst: joins that would leave a node pending take turns from the count of the list to
    their commit, so racing threads on SQLite and PostgreSQL fill exactly its places, never more."""
    room = PendingRoom(max_nodes=4, ttl_s=3600)
    racers = 16

    def join(i: int) -> str:
        try:
            store.node_admission.join(spec(f"rogue-{i}"), None, "cluster", cluster_token=True, waiting=room)
            return "pending"
        except PendingListFull:
            return "full"

    assert race(racers, join) == {"pending": 4, "full": racers - 4}
    assert len([n for n in store.fleet.list() if n.status == "pending"]) == 4


def test_a_pool_node_lost_for_an_hour_gives_its_place_to_the_next_join(store: Store) -> None:
    """An autoscaler that shrinks a pool and grows it again needs no person to clear the nodes it took away."""
    token = store.node_pools.create("gpu-a", PoolTokenRequest(max_nodes=2))
    for node_id in ("old-1", "old-2"):
        store.node_admission.join(spec(node_id), None, token.join_token, cluster_token=False)
    store.node_admission.revoke("old-2")

    def silent(node_id: str, seconds: float) -> None:
        with Session(store.engine) as session:
            session.exec(
                update(NodeRow)
                .where(col(NodeRow.node_id) == node_id)
                .values(lost=True, status="lost", seen_at=utcnow() - timedelta(seconds=seconds))
            )
            session.commit()

    silent("old-1", POOL_NODE_GONE_S - 60)  # lost a while: it may come back, and keeps its place
    with pytest.raises(PoolFull):
        store.node_admission.join(spec("new-1"), None, token.join_token, cluster_token=False)
    silent("old-1", POOL_NODE_GONE_S + 1)  # gone: the next join takes its place
    assert store.node_admission.join(spec("new-1"), None, token.join_token, cluster_token=False).node.pool == "gpu-a"
    assert store.fleet.get("old-1") is None and store.fleet.get("old-2") is not None  # revoked: kept, with its place
    assert store.node_pools.list()[0].nodes == 2
    with pytest.raises(PoolFull):
        store.node_admission.join(spec("new-2"), None, token.join_token, cluster_token=False)


def test_joins_racing_for_a_gone_nodes_place_free_it_once(store: Store) -> None:
    token = store.node_pools.create("gpu-a", PoolTokenRequest(max_nodes=1))
    store.node_admission.join(spec("old"), None, token.join_token, cluster_token=False)
    with Session(store.engine) as session:
        session.exec(
            update(NodeRow).values(lost=True, status="lost", seen_at=utcnow() - timedelta(seconds=POOL_NODE_GONE_S + 1))
        )
        session.commit()
    racers = 8

    def join(i: int) -> str:
        try:
            store.node_admission.join(spec(f"new-{i}"), None, token.join_token, cluster_token=False)
            return "in"
        except PoolFull:
            return "full"

    assert race(racers, join) == {"in": 1, "full": racers - 1}
    [kept] = store.fleet.list()
    assert kept.node_id.startswith("new-") and store.node_pools.list()[0].nodes == 1
