"""A node that lies about the replicas it runs and about whom it serves, against the real pool and store.

Before (issue 34): a real `berth node` patched only in its heartbeat claimed 4 warm replicas on 4×H100 at
$0.01/h and captured 30 of 36 steps of 12 tasks across two tenants, reading every one of those
conversations, since the pool adopted any replica a node reported. A node admitted for another purpose
registered `--label dedicated=tv` and was counted as tenant tv's; and tv's one waiting step had the scaler
load replicas on nodes tv could never use, up to max_replicas. Here each lie meets the pool over a real store.
"""

from __future__ import annotations

from collections import Counter

import pytest

from orchestrator.catalogue import ModelCatalogue
from orchestrator.config import BerthConfig
from orchestrator.pool.scaler import ScaleUp
from orchestrator.pool.service import PoolService
from orchestrator.store import Store
from sdk.wire.fleet import NodeHeartbeat, NodeSpec
from sdk.wire.identity import Role, TenantSpec, Trust
from sdk.wire.lease import LeaseRequest, ReleaseLease
from tests.unit.test_pool_service import SECRET, Clock, join

MODEL = "llama-3.1-8b"
LIAR = "gpu-liar"


def pool_over(store: Store) -> PoolService:
    return PoolService(store, ModelCatalogue(BerthConfig(), store.models), sync_every_s=0.0, clock=Clock())


def step(task: str, n: int, tenant: str, model: str = MODEL) -> LeaseRequest:
    return LeaseRequest(task_id=task, step=n, model=model, tokens=500, tenant=tenant)


def node(store: Store, node_id: str, *, usd_per_hour: float = 12.0, labels: dict[str, str] | None = None) -> None:
    """A node that registers 4×H100 (with `labels` of its own choosing) and lists no replica yet."""
    store.fleet.register(
        NodeSpec.model_validate(
            {
                "node_id": node_id,
                "datacenter": "east",
                "zone": "east-1",
                "usd_per_hour": usd_per_hour,
                "labels": labels or {},
                "gpus": [{"index": i, "type_name": "H100-80GB", "memory_total_mib": 81559} for i in range(4)],
            }
        ),
        SECRET,
    )
    store.fleet.heartbeat(NodeHeartbeat.model_validate({"node_id": node_id}), SECRET)


def claim_warm_replicas(store: Store) -> list[str]:
    """The liar's heartbeat: one warm replica of MODEL on each of its GPUs, none of which it was asked to load."""
    claimed = [{"replica_id": f"r-fake-{i}", "model": MODEL, "gpu_indexes": [i], "state": "warm"} for i in range(4)]
    store.fleet.heartbeat(NodeHeartbeat.model_validate({"node_id": LIAR, "replicas": claimed}), SECRET)
    return [c["replica_id"] for c in claimed]


def serve_rounds(pool: PoolService, tasks: dict[str, str], rounds: int) -> list:
    """Each task's steps, a round at a time as tasks run side by side: every step asks, then every step releases."""
    grants = []
    for n in range(1, rounds + 1):
        placed = [pool.acquire(step(task, n, tenant)) for task, tenant in tasks.items()]
        assert all(g.outcome == "placed" for g in placed), [g.reason for g in placed if g.outcome != "placed"]
        for g in placed:
            pool.release(ReleaseLease(lease_id=g.lease_id, replica_warm=True))
        grants += placed
    return grants


def test_a_node_claiming_warm_replicas_it_was_never_asked_to_load_captures_no_step(store: Store) -> None:
    """12 tasks of two tenants, 3 steps each, on a fleet of an honest node serving 4 warm replicas the pool
    started and a liar claiming 4 warm replicas at $0.01/h. Before, the liar's claims took 24 of the 36 steps
    (8 of the 12 tasks); now they take none, and are known as claims."""
    for tenant in ("acme", "tv"):
        store.tenants.create(TenantSpec(name=tenant))
    warm = [{"replica_id": f"r-honest-{i}", "model": MODEL, "gpu_indexes": [i], "state": "warm"} for i in range(4)]
    join(store, "gpu-honest", count=4, replicas=warm)  # started by a pool: their loads are on record
    node(store, LIAR, usd_per_hour=0.01)
    fakes = claim_warm_replicas(store)
    pool = pool_over(store)
    tasks = {f"{tenant}:t{i}": tenant for tenant in ("acme", "tv") for i in range(6)}

    grants = serve_rounds(pool, tasks, rounds=3)

    on = Counter(g.node_id for g in grants)
    assert len(grants) == 36 and on[LIAR] == 0, on
    assert not {g.replica_id for g in grants} & set(fakes)
    assert pool.claimed() == [(LIAR, f) for f in fakes]  # shown as claims, never leased


def test_claimed_replicas_hold_their_gpus_but_a_new_replica_there_is_the_pools_own(store: Store) -> None:
    """With only the liar's GPUs free, a step gets a replica the pool starts (a load it sends, on record), never
    one of the claims; the claims' memory still counts, so no GPU is booked past what it holds."""
    store.tenants.create(TenantSpec(name="acme"))
    node(store, LIAR, usd_per_hour=0.01)
    fakes = claim_warm_replicas(store)
    pool = pool_over(store)
    grant = pool.acquire(step("acme:t1", 1, "acme"))
    assert grant.outcome == "placed" and grant.replica_id not in fakes and grant.load is not None
    assert grant.replica_id in {r.replica_id for r in store.reservations.list()}
    device = pool.fleet.nodes[LIAR].device(grant.gpu_indexes[0])
    assert device.reserved_gib <= device.memory_gib and device.replicas == 2  # the claim and the new replica


def test_a_replica_the_pool_started_is_served_again_after_a_control_plane_restart(store: Store) -> None:
    """The pool's record of a load (its GPU reservation) outlives the pool: a new pool serves from the replica
    the node still runs, as before, while a claim beside it stays unproven."""
    store.tenants.create(TenantSpec(name="acme"))
    node(store, "gpu-a")
    first = pool_over(store)
    grant = first.acquire(step("acme:t1", 1, "acme"))
    assert grant.outcome == "placed" and grant.load is not None
    first.release(ReleaseLease(lease_id=grant.lease_id, replica_warm=True))
    listed = [
        {"replica_id": grant.replica_id, "model": MODEL, "gpu_indexes": grant.gpu_indexes, "state": "warm"},
        {"replica_id": "r-invented", "model": MODEL, "gpu_indexes": [3], "state": "warm"},
    ]
    store.fleet.heartbeat(NodeHeartbeat.model_validate({"node_id": "gpu-a", "replicas": listed}), SECRET)

    restarted = pool_over(store)
    again = restarted.acquire(step("acme:t1", 2, "acme"))
    assert (again.replica_id, again.tier, again.load) == (grant.replica_id, "warm", None)
    assert restarted.claimed() == [("gpu-a", "r-invented")]
    # What /v1/replicas and the node's view say: the pool's replica proven, the claim not.
    shown = {r.replica_id: r.proven for r in store.fleet.replicas(MODEL)}
    assert shown == {grant.replica_id: True, "r-invented": False}
    assert {r.replica_id: r.proven for r in store.fleet.get("gpu-a").replicas} == shown


def test_a_replica_claimed_on_another_node_than_its_record_is_not_believed(store: Store) -> None:
    """A record proves the replica it describes, on its node, model and GPUs: another node naming a real
    replica's id proves nothing, and takes neither the id nor the replica's steps."""
    store.tenants.create(TenantSpec(name="acme"))
    node(store, "gpu-a")
    pool = pool_over(store)
    grant = pool.acquire(step("acme:t1", 1, "acme"))
    pool.release(ReleaseLease(lease_id=grant.lease_id, replica_warm=True))
    real = {"replica_id": grant.replica_id, "model": MODEL, "gpu_indexes": grant.gpu_indexes, "state": "warm"}
    store.fleet.heartbeat(NodeHeartbeat.model_validate({"node_id": "gpu-a", "replicas": [real]}), SECRET)
    node(store, LIAR, usd_per_hour=0.01)
    copied = {**real, "gpu_indexes": [2]}
    store.fleet.heartbeat(NodeHeartbeat.model_validate({"node_id": LIAR, "replicas": [copied]}), SECRET)

    restarted = pool_over(store)
    again = restarted.acquire(step("acme:t1", 2, "acme"))
    assert (again.node_id, again.replica_id, again.tier) == ("gpu-a", grant.replica_id, "warm")
    assert restarted.claimed() == [(LIAR, grant.replica_id)]


def test_a_nodes_own_dedicated_label_does_not_make_it_the_tenants(store: Store) -> None:
    """A node admitted for another purpose registers `dedicated=tv`: tv's steps are not sent there (nor shown as
    dedicated to tv) until an operator says so."""
    store.tenants.create(TenantSpec(name="tv", trust=Trust.dedicated))
    node(store, "gpu-other", labels={"dedicated": "tv", "rack": "r7"})
    assert store.fleet.get("gpu-other").labels == {"rack": "r7"}  # type: ignore[union-attr]
    pool = pool_over(store)
    refused = pool.acquire(step("tv:t1", 1, "tv"))
    assert refused.outcome == "never" and "dedicated to it by an operator" in refused.reason
    assert pool.fleet.dedicated_nodes == {}

    store.fleet.set_trust("gpu-other", {"dedicated": "tv"})
    assert store.fleet.get("gpu-other").labels == {"dedicated": "tv", "rack": "r7"}  # type: ignore[union-attr]
    placed = pool.acquire(step("tv:t1", 1, "tv"))
    assert placed.outcome == "placed" and placed.node_id == "gpu-other"


def test_a_trust_label_an_operator_did_not_set_is_refused_by_name(store: Store) -> None:
    node(store, "gpu-a")
    with pytest.raises(Exception, match="not a trust label") as refused:
        store.fleet.set_trust("gpu-a", {"rack": "r7"})
    assert getattr(refused.value, "field", None) == "labels"


def test_the_scaler_loads_nothing_for_a_waiting_tenant_that_can_use_no_node(store: Store) -> None:
    """tv is dedicated and no node is dedicated to it yet (one is still joining, so its step waits rather than
    fails). Before, its waiting step was demand for the model, and the scaler loaded replicas on the shared node,
    which tv can never use; now it loads nothing."""
    store.tenants.create(TenantSpec(name="tv", trust=Trust.dedicated))
    node(store, "gpu-shared")
    store.node_admission.mint("gpu-later", ttl_s=600)  # a node on its way: tv's step waits for it
    pool = pool_over(store)
    waiting = pool.acquire(step("tv:t1", 1, "tv"))
    assert waiting.outcome == "wait"
    plan = pool.plan_scaling()
    assert [a for a in plan if isinstance(a, ScaleUp) and a.model == MODEL] == []


def test_the_scaler_loads_nothing_an_isolated_waiting_tenant_cannot_share(store: Store) -> None:
    """An isolated tenant's step waits for a GPU no other tenant uses. A replica the scaler would start is
    placed for no tenant, beside another tenant's: it would serve the waiting step never, so none is started."""
    store.tenants.create(TenantSpec(name="acme"))
    store.tenants.create(TenantSpec(name="vault", trust=Trust.isolated))
    join(store, "gpu-a", count=1)
    pool = pool_over(store)
    assert pool.acquire(step("acme:t1", 1, "acme", model="llama-3.2-1b")).outcome == "placed"
    assert pool.acquire(step("vault:t1", 1, "vault")).outcome == "wait"
    assert [a for a in pool.plan_scaling() if isinstance(a, ScaleUp) and a.model == MODEL] == []


async def test_only_an_operator_sets_a_nodes_trust_labels(store: Store, api, client_as) -> None:
    """`PUT /v1/nodes/{id}/trust` is the operator's word on whom a node serves; a tenant's key cannot say it."""
    store.tenants.create(TenantSpec(name="tv", trust=Trust.dedicated))
    node(store, "gpu-other", labels={"dedicated": "tv"})
    async with client_as(Role.agent, "tv") as tenant:
        refused = await tenant.put("/v1/nodes/gpu-other/trust", json={"dedicated": "tv"})
        assert refused.status_code == 403
    assert store.fleet.get("gpu-other").labels == {}  # type: ignore[union-attr]
    bad = await api.put("/v1/nodes/gpu-other/trust", json={"dedicated": "tv", "isolated": "x"})
    assert bad.status_code == 422
    done = await api.put("/v1/nodes/gpu-other/trust", json={"dedicated": "tv"})
    assert done.status_code == 200 and done.json()["labels"] == {"dedicated": "tv"}
    cleared = await api.put("/v1/nodes/gpu-other/trust", json={})
    assert cleared.json()["labels"] == {}
