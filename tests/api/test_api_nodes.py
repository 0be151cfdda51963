"""The fleet through the API, the SDK and `berth nodes`: admitting, joining, heartbeats, the reaper, draining,
revoking and removing (a node's steps are told to move by a signal: tests/security/test_node_admission.py).

These routes never touch Temporal, so the gateway here points at a closed port: the tests
need no dev server, and a route that did reach for Temporal would fail loudly.
"""

from __future__ import annotations

import functools
from datetime import datetime, timedelta
from pathlib import Path

import httpx
import pytest
from api_helpers import ClientAs, error_of, task_body

from orchestrator.api import TemporalGateway
from orchestrator.cli import output
from orchestrator.cli.main import main
from orchestrator.config import BerthConfig
from orchestrator.store import Store
from orchestrator.store.tables import utcnow
from sdk import Client, NodeView
from sdk.wire.fleet import NodeHeartbeat, NodeSpec
from sdk.wire.identity import Role, TenantSpec

JOIN_TOKEN = "join-me-7f3a"
SECRET_HEADER = "X-Berth-Node-Secret"


@pytest.fixture
def config(tmp_path: Path) -> BerthConfig:
    return BerthConfig(data_dir=tmp_path, database_url=f"sqlite:///{tmp_path}/berth.db", join_token=JOIN_TOKEN)


@pytest.fixture
def gateway(closed_port: int) -> TemporalGateway:
    return TemporalGateway(f"127.0.0.1:{closed_port}")


def registration(node_id: str = "gpu-1", gpus: list[str] | None = None, **fields: object) -> dict:
    types = gpus if gpus is not None else ["H100-80GB", "H100-80GB"]
    return {
        "node_id": node_id,
        "join_token": JOIN_TOKEN,
        "datacenter": "us-east",
        "zone": "us-east-1a",
        "capacity": "on-demand",
        "usd_per_hour": 5.98,
        "labels": {"dedicated": "tenant-a"},
        "disk_bandwidth_gbps": 3.5,
        "weights_cache_capacity_bytes": 10**12,
        "gpus": [
            {
                "index": i,
                "uuid": f"GPU-{node_id}-{i}",
                "type_name": t,
                "memory_total_mib": 81559,
                "mig_mode": False,
                "mig_devices": [],
            }
            for i, t in enumerate(types)
        ],
        **fields,
    }


def heartbeat(node_id: str = "gpu-1", **fields: object) -> dict:
    return {
        "node_id": node_id,
        "gpus": [{"index": 0, "memory_used_mib": 42_000, "utilization_pct": 88, "ecc_errors": 0, "healthy": True}],
        "cached_weights": [{"model": "llama-3.1-8b", "size_bytes": 16 * 2**30}],
        "replicas": [
            {
                "replica_id": "r-1",
                "model": "llama-3.1-8b",
                "gpu_indexes": [0],
                "state": "warm",
                "outstanding_tokens": 900,
                "active_leases": 2,
            }
        ],
        **fields,
    }


async def admit(api: httpx.AsyncClient, node_id: str = "gpu-1") -> str:
    """A per-node join token for `node_id`, minted by the admin key."""
    admitted = await api.post(f"/v1/nodes/{node_id}/admit")
    assert admitted.status_code == 201, admitted.text
    return admitted.json()["join_token"]


async def join(api: httpx.AsyncClient, node_id: str = "gpu-1", **fields: object) -> str:
    """Join admitted, with a per-node token; the node's secret."""
    joined = await api.post(
        "/v1/nodes/register", json=registration(node_id, join_token=await admit(api, node_id), **fields)
    )
    assert joined.status_code == 201, joined.text
    return joined.json()["node_secret"]


async def test_a_node_joins_and_is_listed(api: httpx.AsyncClient) -> None:
    token = await admit(api)
    joined = await api.post("/v1/nodes/register", json=registration(join_token=token))
    assert joined.status_code == 201
    body = joined.json()
    assert len(body["node_secret"]) >= 40 and "join_token" not in body["node"]
    assert body["node"]["status"] == "healthy" and body["node"]["last_heartbeat_at"] is None
    listed = (await api.get("/v1/nodes")).json()
    assert [n["node_id"] for n in listed] == ["gpu-1"] and listed[0]["gpus"][1]["type_name"] == "H100-80GB"
    assert JOIN_TOKEN not in (await api.get("/v1/nodes/gpu-1")).text and token not in (await api.get("/v1/nodes")).text


async def test_a_node_that_joins_with_the_cluster_token_waits_for_approval(api: httpx.AsyncClient) -> None:
    joined = await api.post("/v1/nodes/register", json=registration())
    assert joined.status_code == 201 and joined.json()["node"]["status"] == "pending"
    assert [n["node_id"] for n in (await api.get("/v1/nodes", params={"status": "pending"})).json()] == ["gpu-1"]
    approved = await api.post("/v1/nodes/gpu-1/approve")
    assert approved.status_code == 200 and approved.json()["status"] == "healthy"
    assert (await api.post("/v1/nodes/gpu-1/approve")).json()["status"] == "healthy"  # idempotent


async def test_registering_again_with_the_node_secret_is_idempotent(api: httpx.AsyncClient) -> None:
    secret = await join(api)
    again = await api.post("/v1/nodes/register", json=registration(usd_per_hour=4.5), headers={SECRET_HEADER: secret})
    assert again.status_code == 200 and again.json()["node_secret"] == secret
    assert again.json()["node"]["usd_per_hour"] == 4.5
    assert len((await api.get("/v1/nodes")).json()) == 1


@pytest.mark.parametrize("headers", [{}, {SECRET_HEADER: "not-the-secret"}])
async def test_a_reused_node_id_is_refused_and_changes_nothing(api: httpx.AsyncClient, headers: dict) -> None:
    await join(api)
    before = (await api.get("/v1/nodes/gpu-1")).json()
    refused = await api.post("/v1/nodes/register", json=registration(datacenter="eu-west"), headers=headers)
    assert refused.status_code == 409 and error_of(refused)["field"] == "node_id"
    assert "already registered by another node" in error_of(refused)["message"]
    assert (await api.get("/v1/nodes/gpu-1")).json() == before


async def test_a_wrong_join_token_is_refused_with_a_clear_reason(api: httpx.AsyncClient) -> None:
    refused = await api.post("/v1/nodes/register", json=registration(join_token="guess"))
    assert refused.status_code == 401
    assert error_of(refused)["field"] == "join_token" and "join token is wrong" in error_of(refused)["message"]
    assert (await api.get("/v1/nodes")).json() == []


async def test_without_a_cluster_join_token_only_per_node_tokens_let_nodes_in(api: httpx.AsyncClient, app) -> None:
    app.state.services.config.join_token = None
    refused = await api.post("/v1/nodes/register", json=registration())
    assert refused.status_code == 401 and error_of(refused)["field"] == "join_token"
    assert "no cluster join token" in error_of(refused)["message"]
    await join(api)
    assert (await api.get("/v1/nodes/gpu-1")).json()["status"] == "healthy"


@pytest.mark.parametrize(
    "change, field",
    [
        ({"gpus": ["H100-80GB", "B300-288GB"]}, "gpus.1.type_name"),
        ({"capacity": "reserved"}, "capacity"),
        ({"usd_per_hour": -1}, "usd_per_hour"),
        ({"node_id": "GPU 1"}, "node_id"),
        ({"disk_bandwidth_gbp": 3}, "disk_bandwidth_gbp"),
    ],
)
async def test_bad_registrations_name_the_field_and_change_nothing(
    api: httpx.AsyncClient, change: dict, field: str
) -> None:
    refused = await api.post("/v1/nodes/register", json=registration(**change))
    assert refused.status_code == 422 and error_of(refused)["field"] == field, refused.text
    assert (await api.get("/v1/nodes")).json() == []


async def test_an_unknown_gpu_type_may_join_as_unknown(api: httpx.AsyncClient) -> None:
    await join(api, gpus=["unknown"])
    assert (await api.get("/v1/nodes/gpu-1")).json()["gpus"][0]["type_name"] == "unknown"


async def test_a_heartbeat_updates_metrics_caches_and_replicas(api: httpx.AsyncClient) -> None:
    secret = await join(api)
    beat = await api.post("/v1/nodes/gpu-1/heartbeat", json=heartbeat(), headers={SECRET_HEADER: secret})
    assert beat.status_code == 200, beat.text
    node = NodeView.model_validate((await api.get("/v1/nodes/gpu-1")).json())
    assert node.last_heartbeat_at is not None and node.gpus[0].utilization_pct == 88
    assert node.cached_weights[0].size_bytes == 16 * 2**30
    replicas = (await api.get("/v1/replicas", params={"model": "llama-3.1-8b"})).json()
    assert [(r["node_id"], r["gpu_indexes"], r["state"], r["active_leases"]) for r in replicas] == [
        ("gpu-1", [0], "warm", 2)
    ]
    assert (await api.get("/v1/replicas", params={"model": "other"})).json() == []


async def test_heartbeats_from_strangers_are_refused(api: httpx.AsyncClient) -> None:
    ghost = await api.post("/v1/nodes/ghost/heartbeat", json=heartbeat("ghost"), headers={SECRET_HEADER: "x"})
    assert ghost.status_code == 401 and error_of(ghost)["field"] == "node_id"  # as a wrong secret: ids stay unmapped
    secret = await join(api)
    for headers in ({}, {SECRET_HEADER: secret + "x"}):
        refused = await api.post("/v1/nodes/gpu-1/heartbeat", json=heartbeat(), headers=headers)
        assert refused.status_code == 401 and "node secret" in error_of(refused)["message"]
    mismatch = await api.post("/v1/nodes/gpu-1/heartbeat", json=heartbeat("gpu-2"), headers={SECRET_HEADER: secret})
    assert mismatch.status_code == 422 and error_of(mismatch)["field"] == "node_id"
    bad_gpu = await api.post(
        "/v1/nodes/gpu-1/heartbeat",
        headers={SECRET_HEADER: secret},
        json=heartbeat(replicas=[{"replica_id": "r-9", "model": "m", "gpu_indexes": [5], "state": "warm"}]),
    )
    assert bad_gpu.status_code == 422 and error_of(bad_gpu)["field"] == "replicas.0.gpu_indexes"
    node = (await api.get("/v1/nodes/gpu-1")).json()
    assert node["last_heartbeat_at"] is None and node["replicas"] == []


async def test_heartbeat_numbers_beyond_the_stores_integers_are_422_naming_the_field(api: httpx.AsyncClient) -> None:
    """They land in 64-bit columns; a bigger one used to reach the SQLite driver and come back a 500."""
    secret = await join(api)
    big = 2**63
    replica = {"replica_id": "r-1", "model": "llama-3.1-8b", "gpu_indexes": [0], "state": "warm"}
    for change, field in (
        ({"gpus": [{"index": 0, "memory_used_mib": big}]}, "gpus.0.memory_used_mib"),
        ({"gpus": [{"index": 0, "ecc_errors": big}]}, "gpus.0.ecc_errors"),
        ({"cached_weights": [{"model": "llama-3.1-8b", "size_bytes": big}]}, "cached_weights.0.size_bytes"),
        ({"replicas": [{**replica, "outstanding_tokens": big}]}, "replicas.0.outstanding_tokens"),
        ({"replicas": [{**replica, "active_leases": big}]}, "replicas.0.active_leases"),
    ):
        refused = await api.post("/v1/nodes/gpu-1/heartbeat", json=heartbeat(**change), headers={SECRET_HEADER: secret})
        assert refused.status_code == 422 and error_of(refused)["field"] == field, refused.text
    assert (await api.get("/v1/nodes/gpu-1")).json()["last_heartbeat_at"] is None


async def test_nodes_that_miss_heartbeats_are_lost_with_their_replicas(api: httpx.AsyncClient, store: Store) -> None:
    secret = await join(api)
    await api.post("/v1/nodes/gpu-1/heartbeat", json=heartbeat(), headers={SECRET_HEADER: secret})
    assert store.fleet.mark_lost_after(15, now=utcnow() + timedelta(seconds=16)) == ["gpu-1"]
    assert (await api.get("/v1/nodes/gpu-1")).json()["status"] == "lost"
    assert (await api.get("/v1/replicas")).json() == []
    assert [n["node_id"] for n in (await api.get("/v1/nodes", params={"status": "lost"})).json()] == ["gpu-1"]


async def test_the_fleet_is_read_by_keys_of_no_tenant_only(
    api: httpx.AsyncClient, store: Store, client_as: ClientAs
) -> None:
    """The fleet serves every tenant: a tenant's key learns neither other tenants' nodes nor who waits to join."""
    for name in ("acme", "globex"):
        store.tenants.create(TenantSpec(name=name))
    await join(api, labels={"dedicated": "globex", "rack": "r7"})  # its own word: neither shown nor read
    store.fleet.set_trust("gpu-1", {"dedicated": "acme"})  # the operator's
    async with client_as(Role.agent, "acme") as agent, client_as(Role.operator, "globex") as confined:
        for key in (agent, confined):
            for path in ("/v1/nodes", "/v1/nodes/gpu-1", "/v1/replicas"):
                refused = await key.get(path)
                assert refused.status_code == 403 and error_of(refused)["field"] == "authorization", refused.text
    async with client_as(Role.viewer) as watcher:  # a key of no tenant, watching the fleet
        assert (await watcher.get("/v1/nodes/gpu-1")).json()["labels"] == {"dedicated": "acme", "rack": "r7"}


async def test_drain_and_undrain(api: httpx.AsyncClient) -> None:
    await join(api)
    assert (await api.post("/v1/nodes/gpu-1/drain")).json()["status"] == "draining"
    assert (await api.post("/v1/nodes/gpu-1/undrain")).json()["status"] == "healthy"
    missing = await api.post("/v1/nodes/ghost/drain")
    assert missing.status_code == 404 and "ghost" in error_of(missing)["message"]


async def test_the_sdk_reads_and_drains_the_fleet(app, api: httpx.AsyncClient, admin_key: str) -> None:
    secret = await join(api)
    await api.post("/v1/nodes/gpu-1/heartbeat", json=heartbeat(), headers={SECRET_HEADER: secret})
    async with Client("http://berth", api_key=admin_key, transport=httpx.ASGITransport(app)) as client:
        assert [n.node_id for n in await client.nodes()] == ["gpu-1"]
        assert (await client.drain("gpu-1")).status == "draining"
        assert [n.node_id for n in await client.nodes(status="draining")] == ["gpu-1"]
        assert (await client.undrain("gpu-1")).status == "healthy"
        assert (await client.node("gpu-1")).replicas[0].model == "llama-3.1-8b"
        assert [r.outstanding_tokens for r in await client.replicas("llama-3.1-8b")] == [900]


# -- berth nodes ----------------------------------------------------------------------------


@pytest.fixture
def cli(app, monkeypatch: pytest.MonkeyPatch, admin_key: str):
    """`berth …` against the in-process app: the CLI's client gets an ASGI transport, and an admin key."""
    monkeypatch.setenv("BERTH_API_KEY", admin_key)
    monkeypatch.setattr(output, "Client", functools.partial(Client, transport=httpx.ASGITransport(app)))
    return lambda *argv: main([*argv, "--api", "http://berth"])


def test_nodes_list_shows_place_gpus_status_and_replicas(cli, store: Store, capsys) -> None:
    secret = "node-secret-1"
    store.fleet.register(_spec("gpu-1", ["H100-80GB", "H100-80GB"]), secret)
    store.fleet.register(_spec("gpu-2", ["H100-80GB", "L4-24GB"], capacity="spot"), "node-secret-2")
    store.fleet.heartbeat(NodeHeartbeat.model_validate(heartbeat()), secret)
    store.fleet.drain("gpu-2")
    assert cli("nodes", "list") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["NODE", "DATACENTER/ZONE", "CAPACITY", "GPUS", "STATUS", "HEARTBEAT", "REPLICAS"]
    first, second = (line.split() for line in lines[1:3])
    assert first[:5] == ["gpu-1", "us-east/us-east-1a", "on-demand", "2×H100-80GB", "healthy"]
    assert first[5].endswith("s") and first[6:] == ["ago", "1", "(1", "warm)"]
    assert second[:7] == ["gpu-2", "us-east/us-east-1a", "spot", "1×H100-80GB,", "1×L4-24GB", "draining", "never"]
    assert cli("nodes", "undrain", "gpu-2") == 0
    assert capsys.readouterr().out.strip() == "gpu-2 is healthy"
    assert cli("nodes", "show", "gpu-1", "-o", "json") == 0
    assert NodeView.model_validate_json(capsys.readouterr().out).replicas[0].state == "warm"
    assert cli("nodes", "show", "gpu-1") == 0
    panel = capsys.readouterr().out
    assert "us-east/us-east-1a, on-demand" in panel and "H100-80GB" in panel and " warm " in panel


def test_berth_nodes_admits_approves_revokes_and_removes(cli, store: Store, capsys) -> None:
    assert cli("nodes", "admit", "gpu-9", "--ttl", "10m") == 0
    out, err = capsys.readouterr()
    token = out.strip()  # alone on stdout: `--join-token "$(berth nodes admit gpu-9)"`
    assert token.startswith("berth-join_") and "gpu-9, usable once until" in err
    store.node_admission.join(_spec("gpu-9", ["H100-80GB"]), None, token, cluster_token=False)
    store.node_admission.join(_spec("gpu-p", ["H100-80GB"]), None, JOIN_TOKEN, cluster_token=True)
    assert cli("nodes", "list", "--status", "pending") == 0
    assert [line.split()[0] for line in capsys.readouterr().out.splitlines()[1:]] == ["gpu-p"]
    assert cli("nodes", "approve", "gpu-p") == 0
    assert capsys.readouterr().out.strip() == "gpu-p is approved: it is healthy"
    assert cli("nodes", "revoke", "gpu-9") == 0
    assert capsys.readouterr().out.strip() == "gpu-9 is revoked; 0 task(s) told to move their steps"
    assert cli("nodes", "remove", "gpu-9") == 0
    assert capsys.readouterr().out.strip() == "gpu-9 is revoked and removed; 0 task(s) told to move their steps"
    assert store.fleet.get("gpu-9") is None


@pytest.mark.parametrize(
    "argv, line",
    [
        (
            ("nodes", "admit", "gpu-9", "--ttl", "soon"),
            "error: ttl: expected a duration such as 30s, 2m or 45, got 'soon'",
        ),
        (("nodes", "admit", "gpu-9", "--ttl", "8d"), "error: ttl_s: "),
        (("nodes", "admit", "GPU 9"), "error: node_id: "),
        (("nodes", "approve", "ghost"), "error: node_id: node 'ghost' is not registered"),
        (("nodes", "revoke", "ghost"), "error: node_id: node 'ghost' is not registered"),
        (("nodes", "remove", "ghost"), "error: node_id: node 'ghost' is not registered"),
    ],
)
def test_admission_refusals_name_the_field(cli, capsys, argv: tuple[str, ...], line: str) -> None:
    assert cli(*argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(line), err


async def test_a_revocation_holds_while_temporal_is_down_and_names_the_tasks_it_could_not_tell(
    app, api: httpx.AsyncClient, store: Store, admin_key: str
) -> None:
    """This module's Temporal is a closed port: the credential dies anyway, the task is named as not reached."""
    from orchestrator.store import LeaseRecord

    secret = await join(api)
    store.leases.add(
        LeaseRecord(
            lease_id="l-1",
            task_id="t-on-gpu-1",
            step=1,
            model="llama-3.1-8b",
            node_id="gpu-1",
            replica_id="r-1",
            tokens=500,
            tenant="default",
        )
    )
    async with Client("http://berth", api_key=admin_key, transport=httpx.ASGITransport(app)) as client:
        done = await client.revoke_node("gpu-1")
        assert (done.removed, done.tasks_moved, done.tasks_unreached) == (False, [], ["t-on-gpu-1"])
        assert (await client.node("gpu-1")).status == "revoked"
    refused = await api.post("/v1/nodes/gpu-1/heartbeat", json=heartbeat(), headers={SECRET_HEADER: secret})
    assert refused.status_code == 401 and "revoked" in error_of(refused)["message"]


@pytest.mark.parametrize("argv", [("nodes", "show", "ghost"), ("nodes", "drain", "ghost")])
def test_nodes_refusals_are_one_line_and_exit_2(cli, capsys, argv: tuple[str, ...]) -> None:
    assert cli(*argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: node_id: node 'ghost' is not registered"]


def _spec(node_id: str, gpus: list[str], **fields: object) -> NodeSpec:
    body = registration(node_id, gpus=gpus, **fields)
    body.pop("join_token")
    return NodeSpec.model_validate(body)


async def test_a_task_no_node_could_ever_serve_is_refused_at_submission(api: httpx.AsyncClient, agent) -> None:
    await join(api, gpus=["H100-80GB"])
    refused = await api.post("/v1/tasks", json=task_body(agent, model="llama-3.1-70b"))
    assert refused.status_code == 422 and error_of(refused)["field"] == "model"
    assert "llama-3.1-70b needs 151.5 GiB" in error_of(refused)["message"]
    assert "largest GPU has" in error_of(refused)["message"]
    assert (await api.get("/v1/tasks")).json() == []


async def test_while_an_admitted_node_has_not_joined_yet_a_task_its_gpus_may_hold_is_accepted(
    api: httpx.AsyncClient, agent
) -> None:
    """`berth up` admits its nodes, then starts them: one reporting first must not get a task refused that
    the others could run."""
    await join(api, gpus=["H100-80GB"])
    assert (await api.post("/v1/nodes/big-node/admit", json={})).status_code == 201
    submitted = await api.post("/v1/tasks", json=task_body(agent, model="llama-3.1-70b"))
    # Past the model check: this test's API has no Temporal behind it, so the submission stops there (503).
    assert submitted.status_code == 503 and "Temporal" in error_of(submitted)["message"], submitted.text


async def test_a_preempted_node_drains_hears_its_deadline_and_is_back_when_it_registers_again(
    api: httpx.AsyncClient,
) -> None:
    secret = await join(api)
    preempted = await api.post("/v1/nodes/gpu-1/preempt", json={"notice_s": 30})
    assert preempted.status_code == 200 and preempted.json()["status"] == "draining"
    deadline = datetime.fromisoformat(preempted.json()["preempt_by"])
    assert timedelta(seconds=25) < deadline - utcnow() <= timedelta(seconds=30)
    beat = await api.post("/v1/nodes/gpu-1/heartbeat", json=heartbeat(), headers={SECRET_HEADER: secret})
    assert beat.json()["preempt_by"] == preempted.json()["preempt_by"]  # the node learns it here
    again = await api.post("/v1/nodes/register", json=registration(), headers={SECRET_HEADER: secret})
    assert again.json()["node"]["status"] == "healthy" and again.json()["node"]["preempt_by"] is None


@pytest.mark.parametrize(
    "node_id, body, status, field",
    [
        ("ghost", {"notice_s": 30}, 404, "node_id"),
        ("gpu-1", {"notice_s": -1}, 422, "notice_s"),
        ("gpu-1", {"notice": 30}, 422, "notice"),
    ],
)
async def test_bad_preemptions_are_refused_and_change_nothing(
    api: httpx.AsyncClient, node_id: str, body: dict, status: int, field: str
) -> None:
    await join(api)
    refused = await api.post(f"/v1/nodes/{node_id}/preempt", json=body)
    assert refused.status_code == status and error_of(refused)["field"] == field, refused.text
    assert (await api.get("/v1/nodes/gpu-1")).json()["status"] == "healthy"


def test_berth_nodes_preempt_reads_durations_and_refuses_bad_ones() -> None:
    from orchestrator.cli.nodes import parse_duration

    assert (parse_duration("30s"), parse_duration("2m"), parse_duration("45"), parse_duration("0")) == (30, 120, 45, 0)
    for bad in ("soon", "-5s", "", "3x"):
        with pytest.raises(ValueError):
            parse_duration(bad)
