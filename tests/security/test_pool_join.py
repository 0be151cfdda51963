"""The GPU nodes of an autoscaled pool join without a person, through a pool token the control plane checks.

Before, every Kubernetes GPU node joined `pending` with the cluster token and waited for `berth nodes approve`, so a
node pool grown by Karpenter or the cluster autoscaler sat idle. Here an operator mints a pool token, nodes of the
pool join with it admitted at once, and each rule that bounds a leaked copy is played: the cap under a concurrent
burst over real HTTP, expiry, revocation, one node revoked alone while the others serve, ids it may not take, labels
a node may not claim, and keys that may not mint one. No Temporal here: no task runs on these nodes.
"""

from __future__ import annotations

import asyncio
import functools
import socket
from collections import Counter
from datetime import timedelta

import httpx
import pytest
from sqlalchemy import update
from sqlmodel import Session, col

from orchestrator.api import TemporalGateway
from orchestrator.catalogue import ModelCatalogue
from orchestrator.config import BerthConfig
from orchestrator.node import control_plane
from orchestrator.node.control_plane import ControlPlane
from orchestrator.pool.service import PoolService
from orchestrator.store import Store
from orchestrator.store.tables import NodePoolTokenRow, utcnow
from sdk.wire.fleet import NodeRegistration
from sdk.wire.identity import Role
from sdk.wire.lease import LeaseRequest, Placed, Wait
from tests.security import test_node_admission as admission
from tests.security.parties import JOIN_TOKEN, error_of

SECRET_HEADER = "X-Berth-Node-Secret"
POOL = "gpu-h100"


@pytest.fixture
def gateway() -> TemporalGateway:
    """A Temporal that never answers: nothing here starts a task, and a route that reached for one would fail."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return TemporalGateway(f"127.0.0.1:{port}")


def registration(node_id: str, join_token: str, **labels: str) -> dict:
    return {
        "node_id": node_id,
        "join_token": join_token,
        "datacenter": "dc1",
        "zone": "dc1-a",
        "labels": labels,
        "gpus": [{"index": 0, "uuid": f"GPU-{node_id}", "type_name": "H100-80GB", "memory_total_mib": 81559}],
    }


def heartbeat(node_id: str) -> dict:
    return {"node_id": node_id, "gpus": [{"index": 0, "memory_used_mib": 1000, "utilization_pct": 5}]}


async def pool_token(api: httpx.AsyncClient, pool: str = POOL, **body: object) -> dict:
    minted = await api.post(f"/v1/node-pools/{pool}/tokens", json=body)
    assert minted.status_code == 201, minted.text
    return minted.json()


async def tokens(api: httpx.AsyncClient) -> dict[str, dict]:
    listed = await api.get("/v1/node-pools/tokens")
    assert listed.status_code == 200, listed.text
    return {t["token_id"]: t for t in listed.json()}


async def test_a_pool_token_admits_its_nodes_with_no_person(api: httpx.AsyncClient, store: Store) -> None:
    token = await pool_token(api, max_nodes=3, ttl_s=3600, trust={"dedicated": "acme"})
    assert token["join_token"].startswith("berth-pool_") and token["pool"] == POOL

    joined = await api.post("/v1/nodes/register", json=registration("ip-10-0-1-7", token["join_token"]))
    assert joined.status_code == 201, joined.text
    node = joined.json()["node"]
    assert node["status"] == "healthy" and node["pool"] == POOL
    assert node["labels"] == {"pool": POOL, "dedicated": "acme"}  # the token's word, an operator's
    secret = joined.json()["node_secret"]
    beat = await api.post(
        "/v1/nodes/ip-10-0-1-7/heartbeat", json=heartbeat("ip-10-0-1-7"), headers={SECRET_HEADER: secret}
    )
    assert beat.status_code == 200 and beat.json()["status"] == "healthy", beat.text
    store.fleet.authenticate("ip-10-0-1-7", secret)  # its step books are open: no approval stands between

    listed = (await tokens(api))[token["token_id"]]
    assert listed["nodes"] == 1 and listed["max_nodes"] == 3 and "join_token" not in listed
    assert token["join_token"] not in (await api.get("/v1/node-pools/tokens")).text
    audited = [(e.method, e.path, e.status) for e in store.audit.list(limit=50)]
    assert ("POST", f"/v1/node-pools/{POOL}/tokens", 201) in audited


async def test_the_cap_holds_under_a_concurrent_burst_of_joins(api: httpx.AsyncClient, api_url: str) -> None:
    token = await pool_token(api, max_nodes=5)
    burst = 40

    async with httpx.AsyncClient(base_url=api_url, timeout=60) as http:
        answers = await asyncio.gather(
            *(
                http.post("/v1/nodes/register", json=registration(f"burst-{i}", token["join_token"]))
                for i in range(burst)
            )
        )

    assert Counter(a.status_code for a in answers) == {201: 5, 429: burst - 5}, [
        a.text for a in answers if a.status_code not in (201, 429)
    ]
    refused = next(a for a in answers if a.status_code == 429)
    assert error_of(refused)["field"] == "join_token" and "max_nodes 5" in error_of(refused)["message"]
    assert int(refused.headers["retry-after"]) > 0  # the node agent waits and asks again, as for a full pending list
    admitted = [n for n in (await api.get("/v1/nodes")).json() if n["pool"] == POOL]
    assert len(admitted) == 5 and {n["status"] for n in admitted} == {"healthy"}
    assert (await tokens(api))[token["token_id"]]["nodes"] == 5


async def test_an_expired_or_revoked_token_admits_nobody(api: httpx.AsyncClient, store: Store) -> None:
    expired, revoked = await pool_token(api), await pool_token(api)
    with Session(store.engine) as session:
        session.exec(
            update(NodePoolTokenRow)
            .where(col(NodePoolTokenRow.token_id) == expired["token_id"])
            .values(expires_at=utcnow() - timedelta(seconds=1))
        )
        session.commit()
    done = await api.post(f"/v1/node-pools/tokens/{revoked['token_id']}/revoke")
    assert done.status_code == 200 and done.json()["revoked_at"] is not None, done.text

    for token, why in ((expired, "expired at"), (revoked, "was revoked at")):
        refused = await api.post("/v1/nodes/register", json=registration("late-1", token["join_token"]))
        assert refused.status_code == 401, refused.text
        assert error_of(refused)["field"] == "join_token" and why in error_of(refused)["message"]
    forged = await api.post("/v1/nodes/register", json=registration("late-1", "berth-pool_" + "A" * 43))
    assert forged.status_code == 401 and error_of(forged)["field"] == "join_token"
    assert (await api.get("/v1/nodes")).json() == []
    assert {t["nodes"] for t in (await tokens(api)).values()} == {0}


async def test_a_joined_node_is_revoked_alone_and_the_others_keep_serving(api: httpx.AsyncClient) -> None:
    token = await pool_token(api, max_nodes=3)
    secrets = {}
    for node_id in ("pool-a", "pool-b"):
        joined = await api.post("/v1/nodes/register", json=registration(node_id, token["join_token"]))
        assert joined.status_code == 201, joined.text
        secrets[node_id] = joined.json()["node_secret"]

    assert (await api.post("/v1/nodes/pool-a/revoke")).status_code == 200
    gone = await api.post(
        "/v1/nodes/pool-a/heartbeat", json=heartbeat("pool-a"), headers={SECRET_HEADER: secrets["pool-a"]}
    )
    assert gone.status_code == 401 and error_of(gone)["code"] == "revoked", gone.text
    serving = await api.post(
        "/v1/nodes/pool-b/heartbeat", json=heartbeat("pool-b"), headers={SECRET_HEADER: secrets["pool-b"]}
    )
    assert serving.status_code == 200 and serving.json()["status"] == "healthy", serving.text

    # The revoked node still holds the token: it does not get back in under its id...
    again = await api.post("/v1/nodes/register", json=registration("pool-a", token["join_token"]))
    assert again.status_code == 409 and error_of(again)["field"] == "node_id", again.text
    assert "revoked" in error_of(again)["message"]
    # ...and it keeps its place, so revoking makes no room for the next join of a leaked copy.
    assert (await tokens(api))[token["token_id"]]["nodes"] == 2
    assert (await api.post("/v1/nodes/register", json=registration("pool-c", token["join_token"]))).status_code == 201
    full = await api.post("/v1/nodes/register", json=registration("pool-d", token["join_token"]))
    assert full.status_code == 429, full.text
    # Removing it gives the place back; nodes that joined outlive the token's revocation.
    assert (await api.delete("/v1/nodes/pool-a")).status_code == 200
    assert (await tokens(api))[token["token_id"]]["nodes"] == 2
    assert (await api.post(f"/v1/node-pools/tokens/{token['token_id']}/revoke")).status_code == 200
    still = await api.post(
        "/v1/nodes/pool-b/heartbeat", json=heartbeat("pool-b"), headers={SECRET_HEADER: secrets["pool-b"]}
    )
    assert still.status_code == 200 and still.json()["status"] == "healthy"
    refused = await api.post("/v1/nodes/register", json=registration("pool-d", token["join_token"]))
    assert refused.status_code == 401 and "revoked" in error_of(refused)["message"]


async def test_a_pool_token_never_takes_an_admitted_nodes_id(api: httpx.AsyncClient, store: Store) -> None:
    admitted = store.node_admission.mint("gpu-1", 600).join_token
    first = await api.post("/v1/nodes/register", json=registration("gpu-1", admitted))
    assert first.status_code == 201, first.text
    token = await pool_token(api)
    taken = await api.post("/v1/nodes/register", json=registration("gpu-1", token["join_token"]))
    assert taken.status_code == 409 and error_of(taken)["field"] == "node_id", taken.text
    assert (await tokens(api))[token["token_id"]]["nodes"] == 0  # a refused join takes no place
    beat = await api.post(
        "/v1/nodes/gpu-1/heartbeat", json=heartbeat("gpu-1"), headers={SECRET_HEADER: first.json()["node_secret"]}
    )
    assert beat.status_code == 200 and beat.json()["pool"] is None  # the first machine keeps its id and its secret


async def test_a_nodes_own_labels_claim_no_pool_and_no_trust(api: httpx.AsyncClient) -> None:
    claims = {"pool": POOL, "dedicated": "acme", "rack": "r7"}
    pending = await api.post("/v1/nodes/register", json=registration("claimer", JOIN_TOKEN, **claims))
    assert pending.status_code == 201 and pending.json()["node"]["status"] == "pending", pending.text
    approved = (await api.post("/v1/nodes/claimer/approve")).json()
    assert approved["pool"] is None and approved["labels"] == {"rack": "r7"}

    token = await pool_token(api, pool="gpu-a100")  # no trust labels: its nodes serve every tenant
    joined = await api.post("/v1/nodes/register", json=registration("pooled", token["join_token"], **claims))
    node = joined.json()["node"]
    assert node["pool"] == "gpu-a100" and node["labels"] == {"pool": "gpu-a100", "rack": "r7"}, node


async def test_no_tenants_key_mints_lists_or_revokes_pool_tokens(api: httpx.AsyncClient, client_as) -> None:
    token = await pool_token(api)
    for role, tenant in ((Role.agent, "acme"), (Role.operator, "acme"), (Role.viewer, None)):
        async with client_as(role, tenant=tenant) as http:
            minted = await http.post(f"/v1/node-pools/{POOL}/tokens", json={})
            assert minted.status_code == 403, (role, tenant, minted.text)
            revoked = await http.post(f"/v1/node-pools/tokens/{token['token_id']}/revoke")
            assert revoked.status_code == 403, (role, tenant, revoked.text)
            if tenant is not None:
                assert (await http.get("/v1/node-pools/tokens")).status_code == 403
    async with client_as(Role.operator) as http:  # an operator of no tenant runs the fleet
        assert (await http.post(f"/v1/node-pools/{POOL}/tokens", json={"max_nodes": 2})).status_code == 201
    assert (await tokens(api))[token["token_id"]]["revoked_at"] is None


async def test_the_node_agent_joins_with_a_pool_token_and_waits_for_a_place_in_a_full_pool(
    app, api: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`berth node --join-token` (BERTH_JOIN_TOKEN) is how the chart's DaemonSet hands the agent the pool token; a
    node of a full pool waits (as for a full pending list) and joins once an operator removes one of the pool's."""
    monkeypatch.setattr(control_plane, "_FULL_LIST_RETRY_MAX_S", 0.05)
    token = await pool_token(api, max_nodes=1)
    async with ControlPlane("http://berth", transport=httpx.ASGITransport(app)) as plane:
        first = await plane.register(NodeRegistration.model_validate(registration("agent-1", token["join_token"])))
        assert first.node.status == "healthy" and first.node.pool == POOL
        joining = asyncio.create_task(
            plane.register(NodeRegistration.model_validate(registration("agent-2", token["join_token"])))
        )
        await asyncio.sleep(0.3)
        assert not joining.done()  # waiting for a place, not given up
        # The autoscaler took the first machine away, and an operator removes it.
        assert (await api.delete("/v1/nodes/agent-1")).status_code == 200
        second = await asyncio.wait_for(joining, 5)
    assert second.node.node_id == "agent-2" and second.node.status == "healthy"


async def test_an_autoscaled_pools_nodes_take_steps_as_they_join_with_no_person(
    api: httpx.AsyncClient, store: Store
) -> None:
    """The goal: a wave of new GPU nodes (as Karpenter brings them) is placed on as it joins. With the cluster token
    the same machines wait, and the pool's own placement code places nothing on them until a person approves each."""
    pool = PoolService(store, ModelCatalogue(BerthConfig(), store.models), sync_every_s=0.0)
    step = functools.partial(LeaseRequest, step=1, model=admission.MODEL, tokens=500)

    for node_id in ("waiting-0", "waiting-1"):
        joined = await api.post("/v1/nodes/register", json=admission.registration(node_id))
        secret = {SECRET_HEADER: joined.json()["node_secret"]}
        await api.post(f"/v1/nodes/{node_id}/heartbeat", json=heartbeat(node_id), headers=secret)
    assert isinstance(pool.acquire(step(task_id="t-0")), Wait)

    token = await pool_token(api, max_nodes=8)
    wave = [f"karpenter-{i}" for i in range(4)]
    joins = await asyncio.gather(
        *(api.post("/v1/nodes/register", json=admission.registration(n, token["join_token"])) for n in wave)
    )
    for node_id, joined in zip(wave, joins, strict=True):
        assert joined.status_code == 201 and joined.json()["node"]["status"] == "healthy", joined.text
        secret = {SECRET_HEADER: joined.json()["node_secret"]}
        await api.post(f"/v1/nodes/{node_id}/heartbeat", json=heartbeat(node_id), headers=secret)
    grants = [pool.acquire(step(task_id=f"t-{i}")) for i in range(4)]
    assert all(isinstance(g, Placed) and g.node_id in wave for g in grants), grants
    assert not [e for e in store.audit.list(limit=100) if e.path.endswith("/approve")]  # no person was asked
