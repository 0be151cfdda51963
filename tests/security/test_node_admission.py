"""A node is a party that may lie: who may join the fleet, and how a node is revoked and removed.

One shared join token used to let any holder register a node with a secret of its own choosing, get
leases and read tenants' conversations; and no node could ever be revoked. Here a rogue machine holds
the stolen cluster token, a node offers its own secret, a per-node token is replayed, moved to another
id and used late, and an operator revokes and removes a node whose steps are running: the real app over
a real store, with the pool's own code and a real Temporal workflow that must hear `node_gone`.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta

import httpx
import pytest
from sqlmodel import Session, select
from temporalio.client import Client as TemporalClient

from orchestrator.catalogue import ModelCatalogue
from orchestrator.config import BerthConfig
from orchestrator.pool.service import PoolService
from orchestrator.store import Store
from orchestrator.store.tables import (
    GpuReservationRow,
    LeaseRow,
    NodeGpuRow,
    NodeWeightsRow,
    ReplicaRow,
    utcnow,
)
from sdk import AgentSpec
from sdk.wire.contracts import NODE_GONE_SIGNAL, NodeGone
from sdk.wire.identity import Role
from sdk.wire.lease import LeaseRequest, Placed, Wait
from tests.security.parties import JOIN_TOKEN, error_of

SECRET_HEADER = "X-Berth-Node-Secret"
MODEL = "llama-3.1-8b"


def registration(node_id: str, join_token: str = JOIN_TOKEN) -> dict:
    return {
        "node_id": node_id,
        "join_token": join_token,
        "datacenter": "dc1",
        "zone": "dc1-a",
        "gpus": [{"index": 0, "uuid": f"GPU-{node_id}", "type_name": "H100-80GB", "memory_total_mib": 81559}],
        "weights_cache_capacity_bytes": 10**12,
    }


def heartbeat(node_id: str, replica_id: str = "r-claimed") -> dict:
    """A warm replica of MODEL on GPU 0, and its weights on disk: what the pool would place a step on."""
    return {
        "node_id": node_id,
        "gpus": [{"index": 0, "memory_used_mib": 30_000, "utilization_pct": 5}],
        "cached_weights": [{"model": MODEL, "size_bytes": 16 * 2**30}],
        "replicas": [{"replica_id": replica_id, "model": MODEL, "gpu_indexes": [0], "state": "warm"}],
    }


def booked(lease_id: str) -> dict:
    """The smallest step-books request: what earlier attempts of the leased step booked."""
    return {"lease_id": lease_id, "before_attempt": 1}


@pytest.fixture
def pool(store: Store) -> PoolService:
    """The pool's own code over the app's store (as the orchestrator worker runs it)."""
    return PoolService(store, ModelCatalogue(BerthConfig(), store.models), sync_every_s=0.0)


@pytest.fixture
def node(api: httpx.AsyncClient) -> Iterator:
    """`await node(node_id)`: an admitted node (a per-node token) that reports a warm replica; its secret."""

    async def join(node_id: str) -> str:
        token = (await api.post(f"/v1/nodes/{node_id}/admit")).json()["join_token"]
        joined = await api.post("/v1/nodes/register", json=registration(node_id, token))
        assert joined.status_code == 201 and joined.json()["node"]["status"] == "healthy", joined.text
        secret = joined.json()["node_secret"]
        beat = await api.post(
            f"/v1/nodes/{node_id}/heartbeat", json=heartbeat(node_id), headers={SECRET_HEADER: secret}
        )
        assert beat.status_code == 200, beat.text
        return secret

    yield join


@pytest.fixture
async def running_task(api: httpx.AsyncClient, store: Store) -> str:
    """A task whose workflow runs on the real Temporal dev server (no worker: it waits at its first task)."""
    agent = store.agents.register(
        AgentSpec(name=f"writer-{uuid.uuid4().hex[:6]}", model=MODEL, instructions="Be brief.")
    )
    submitted = await api.post(
        "/v1/tasks", json={"agent": agent.name, "input": "Summarise.", "budget": {"tokens": 5000}}
    )
    assert submitted.status_code in (200, 201, 202), submitted.text
    return submitted.json()["task_id"]


async def node_gone_signals(temporal_client: TemporalClient, task_id: str) -> list[NodeGone]:
    """The `node_gone` signals the task's workflow received, read from its history."""
    history = await temporal_client.get_workflow_handle(task_id).fetch_history()
    signals = [
        e.workflow_execution_signaled_event_attributes
        for e in history.events
        if e.HasField("workflow_execution_signaled_event_attributes")
    ]
    return [
        temporal_client.data_converter.payload_converter.from_payloads(s.input.payloads, [NodeGone])[0]
        for s in signals
        if s.signal_name == NODE_GONE_SIGNAL
    ]


# -- admission ------------------------------------------------------------------------------------------


async def test_a_rogue_node_with_the_stolen_cluster_token_waits_gets_no_lease_and_books_nothing(
    api: httpx.AsyncClient, store: Store, pool: PoolService
) -> None:
    joined = await api.post("/v1/nodes/register", json=registration("rogue"))
    assert joined.status_code == 201 and joined.json()["node"]["status"] == "pending"
    secret = joined.json()["node_secret"]
    beat = await api.post("/v1/nodes/rogue/heartbeat", json=heartbeat("rogue"), headers={SECRET_HEADER: secret})
    assert beat.status_code == 200, beat.text  # operators see its GPUs...
    seen = beat.json()
    assert seen["gpus"][0]["memory_used_mib"] == 30_000
    assert seen["replicas"] == [] and seen["cached_weights"] == []  # ...not what it claims to run
    assert (await api.get("/v1/replicas")).json() == []

    grant = pool.acquire(LeaseRequest(task_id="t-victim", step=1, model=MODEL, tokens=500))
    assert isinstance(grant, Wait)
    assert "rogue" not in pool.fleet.nodes and store.leases.list() == []

    refused = await api.post(
        "/v1/nodes/rogue/steps/booked", json=booked("lease-forged"), headers={SECRET_HEADER: secret}
    )
    assert refused.status_code == 403, refused.text
    assert error_of(refused)["field"] == "node_id" and "not approved" in error_of(refused)["message"]


async def test_a_first_registration_cannot_choose_its_secret(api: httpx.AsyncClient) -> None:
    token = (await api.post("/v1/nodes/gpu-a/admit")).json()["join_token"]
    joined = await api.post("/v1/nodes/register", json=registration("gpu-a", token), headers={SECRET_HEADER: "chosen"})
    assert joined.status_code == 201 and joined.json()["node_secret"] != "chosen"
    chosen = await api.post("/v1/nodes/gpu-a/heartbeat", json=heartbeat("gpu-a"), headers={SECRET_HEADER: "chosen"})
    assert chosen.status_code == 401 and error_of(chosen)["field"] == "node_id"
    minted = joined.json()["node_secret"]
    assert (
        await api.post("/v1/nodes/gpu-a/heartbeat", json=heartbeat("gpu-a"), headers={SECRET_HEADER: minted})
    ).status_code == 200


async def test_a_per_node_token_works_once_only_for_its_node_and_not_after_it_expires(
    api: httpx.AsyncClient, store: Store
) -> None:
    token = (await api.post("/v1/nodes/gpu-a/admit", json={"ttl_s": 600})).json()["join_token"]
    elsewhere = await api.post("/v1/nodes/register", json=registration("gpu-b", token))
    assert elsewhere.status_code == 401 and error_of(elsewhere)["field"] == "join_token"
    assert "admits node 'gpu-a', not 'gpu-b'" in error_of(elsewhere)["message"]
    assert (await api.get("/v1/nodes")).json() == []

    first = await api.post("/v1/nodes/register", json=registration("gpu-a", token))
    assert first.status_code == 201 and first.json()["node"]["status"] == "healthy"
    again = await api.post("/v1/nodes/register", json=registration("gpu-a", token))
    assert again.status_code == 401 and "used already" in error_of(again)["message"]

    late = store.node_admission.mint("gpu-c", 60, now=utcnow() - timedelta(minutes=2)).join_token
    expired = await api.post("/v1/nodes/register", json=registration("gpu-c", late))
    assert expired.status_code == 401 and error_of(expired)["field"] == "join_token"
    assert "expired" in error_of(expired)["message"] and store.fleet.get("gpu-c") is None


@pytest.mark.parametrize(
    "body, field",
    [({"ttl_s": 30}, "ttl_s"), ({"ttl_s": 8 * 86_400}, "ttl_s"), ({"ttl_s": 2**70}, "ttl_s"), ({"ttl": 600}, "ttl")],
)
async def test_a_token_lives_between_a_minute_and_a_week(api: httpx.AsyncClient, body: dict, field: str) -> None:
    refused = await api.post("/v1/nodes/gpu-a/admit", json=body)
    assert refused.status_code == 422 and error_of(refused)["field"] == field, refused.text


async def test_a_per_node_token_outranks_a_pending_claim_on_its_id_and_no_token_admits_a_live_node(
    api: httpx.AsyncClient, node
) -> None:
    squat = await api.post("/v1/nodes/register", json=registration("gpu-a"))
    assert squat.json()["node"]["status"] == "pending"
    secret = await node("gpu-a")  # the operator's token for gpu-a replaces the stranger's claim
    stranger = await api.post(
        "/v1/nodes/gpu-a/heartbeat", json=heartbeat("gpu-a"), headers={SECRET_HEADER: squat.json()["node_secret"]}
    )
    assert stranger.status_code == 401
    assert (
        await api.post("/v1/nodes/gpu-a/heartbeat", json=heartbeat("gpu-a"), headers={SECRET_HEADER: secret})
    ).status_code == 200
    live = await api.post("/v1/nodes/gpu-a/admit")
    assert (
        live.status_code == 409
        and error_of(live)["field"] == "node_id"
        and "admitted already" in error_of(live)["message"]
    )


async def test_approval_lets_a_pending_node_into_the_fleet(api: httpx.AsyncClient, pool: PoolService) -> None:
    joined = await api.post("/v1/nodes/register", json=registration("gpu-p"))
    secret = joined.json()["node_secret"]
    assert (await api.post("/v1/nodes/gpu-p/approve")).json()["status"] == "healthy"
    await api.post("/v1/nodes/gpu-p/heartbeat", json=heartbeat("gpu-p"), headers={SECRET_HEADER: secret})
    grant = pool.acquire(LeaseRequest(task_id="t-1", step=1, model=MODEL, tokens=500))
    assert grant.outcome == "placed" and grant.node_id == "gpu-p"
    books = await api.post(
        "/v1/nodes/gpu-p/steps/booked", json=booked(grant.lease_id or ""), headers={SECRET_HEADER: secret}
    )
    assert books.status_code == 200, books.text


@pytest.mark.parametrize("role, tenant", [(Role.agent, "default"), (Role.viewer, None), (Role.operator, "default")])
@pytest.mark.parametrize("action", ["admit", "approve", "revoke"])
async def test_only_unconfined_operators_admit_approve_and_revoke(
    api: httpx.AsyncClient, client_as, store: Store, role: Role, tenant: str | None, action: str
) -> None:
    await api.post("/v1/nodes/register", json=registration("gpu-p"))
    async with client_as(role, tenant) as other:
        refused = await other.post(f"/v1/nodes/gpu-p/{action}")
        removed = await other.delete("/v1/nodes/gpu-p")
    for answer in (refused, removed):
        assert answer.status_code == 403 and error_of(answer)["field"] == "authorization", answer.text
    assert (await api.get("/v1/nodes/gpu-p")).json()["status"] == "pending"


# -- revocation and removal -------------------------------------------------------------------------------


async def test_a_revoked_node_is_refused_its_leases_are_released_and_its_tasks_are_told_to_move(
    api: httpx.AsyncClient, store: Store, pool: PoolService, node, running_task: str, temporal_client: TemporalClient
) -> None:
    secret = await node("gpu-a")
    grant = pool.acquire(LeaseRequest(task_id=running_task, step=1, model=MODEL, tokens=500))
    assert grant.outcome == "placed" and grant.node_id == "gpu-a"

    revoked = await api.post("/v1/nodes/gpu-a/revoke")
    assert revoked.status_code == 200, revoked.text
    assert revoked.json() == {
        "node_id": "gpu-a",
        "removed": False,
        "tasks_moved": [running_task],
        "tasks_unreached": [],
    }
    assert [(g.node_id, "revoked" in g.reason) for g in await node_gone_signals(temporal_client, running_task)] == [
        ("gpu-a", True)
    ]

    for refused in (
        await api.post("/v1/nodes/gpu-a/heartbeat", json=heartbeat("gpu-a"), headers={SECRET_HEADER: secret}),
        await api.post(
            "/v1/nodes/gpu-a/steps/booked", json=booked(grant.lease_id or ""), headers={SECRET_HEADER: secret}
        ),
    ):
        assert refused.status_code == 401 and "revoked" in error_of(refused)["message"], refused.text
    assert (await api.get("/v1/nodes/gpu-a")).json()["status"] == "revoked"

    pool.sync(force=True)
    assert store.leases.list() == [] and "gpu-a" not in pool.fleet.nodes and pool.fleet.replicas == {}
    assert not isinstance(pool.acquire(LeaseRequest(task_id=running_task, step=2, model=MODEL, tokens=500)), Placed)

    comeback = await api.post("/v1/nodes/register", json=registration("gpu-a"), headers={SECRET_HEADER: secret})
    assert (
        comeback.status_code == 201 and comeback.json()["node"]["status"] == "pending"
    )  # admitted anew, or not at all
    assert comeback.json()["node_secret"] != secret


async def test_a_revocation_outlives_a_task_whose_workflow_ended(
    api: httpx.AsyncClient, store: Store, pool: PoolService, node, running_task: str, temporal_client: TemporalClient
) -> None:
    await node("gpu-a")
    pool.acquire(LeaseRequest(task_id=running_task, step=1, model=MODEL, tokens=500))
    await temporal_client.get_workflow_handle(running_task).terminate("ended before the revocation")
    revoked = await api.post("/v1/nodes/gpu-a/revoke")
    assert revoked.status_code == 200 and revoked.json()["tasks_unreached"] == [running_task]
    assert (await api.get("/v1/nodes/gpu-a")).json()["status"] == "revoked"


async def test_a_removed_node_leaves_no_row_and_its_id_may_be_admitted_again(
    api: httpx.AsyncClient, store: Store, pool: PoolService, node, running_task: str, temporal_client: TemporalClient
) -> None:
    await node("gpu-a")
    grant = pool.acquire(LeaseRequest(task_id=running_task, step=1, model=MODEL, tokens=500))
    assert grant.node_id == "gpu-a"
    with Session(store.engine) as session:  # another pool's reservation of the node's GPU
        session.add(
            GpuReservationRow(
                replica_id="r-other-pool",
                node_id="gpu-a",
                model=MODEL,
                gpu_indexes_json="[0]",
                per_device_gib=20.0,
                pool_id="other",
            )
        )
        session.commit()

    removed = await api.delete("/v1/nodes/gpu-a")
    assert removed.status_code == 200 and removed.json()["removed"] is True
    assert removed.json()["tasks_moved"] == [running_task]
    assert [g.node_id for g in await node_gone_signals(temporal_client, running_task)] == ["gpu-a"]
    assert (await api.get("/v1/nodes/gpu-a")).status_code == 404
    with Session(store.engine) as session:
        for table in (NodeGpuRow, ReplicaRow, NodeWeightsRow, GpuReservationRow, LeaseRow):
            assert session.exec(select(table).where(table.node_id == "gpu-a")).all() == [], table.__tablename__

    pool.sync(force=True)
    assert "gpu-a" not in pool.fleet.nodes and pool.fleet.replicas == {} and not pool.fleet.cached.get(MODEL)

    secret = await node("gpu-a")  # admitted anew, under the same id
    pool.sync(force=True)
    assert "gpu-a" in pool.fleet.nodes and secret
    assert (await api.delete("/v1/nodes/ghost")).status_code == 404
