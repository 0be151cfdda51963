"""Pool tokens through the API and `berth nodes pool-token`: every bad value refused naming its field, the token
shown once and never listed, revocation (the attacker's side: tests/security/test_pool_join.py).

These routes never touch Temporal, so the gateway points at a closed port.
"""

from __future__ import annotations

import functools

import httpx
import pytest
from api_helpers import error_of

from orchestrator.api import TemporalGateway
from orchestrator.cli import output
from orchestrator.cli.main import main
from orchestrator.store import Store
from sdk import Client


@pytest.fixture
def gateway(closed_port: int) -> TemporalGateway:
    return TemporalGateway(f"127.0.0.1:{closed_port}")


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/node-pools/gpu-a/tokens", {"max_nodes": 0}, "max_nodes"),
        ("/v1/node-pools/gpu-a/tokens", {"max_nodes": 10_001}, "max_nodes"),
        ("/v1/node-pools/gpu-a/tokens", {"max_nodes": True}, "max_nodes"),
        ("/v1/node-pools/gpu-a/tokens", {"ttl_s": 59}, "ttl_s"),
        ("/v1/node-pools/gpu-a/tokens", {"ttl_s": 30 * 86_400 + 1}, "ttl_s"),
        ("/v1/node-pools/gpu-a/tokens", {"trust": {"isolated": "acme"}}, "trust.isolated"),
        ("/v1/node-pools/gpu-a/tokens", {"trust": {"dedicated": "Not A Tenant"}}, "trust.dedicated"),
        ("/v1/node-pools/gpu-a/tokens", {"pool": "gpu-b"}, "pool"),
        ("/v1/node-pools/GPU%20A/tokens", {}, "pool"),
        ("/v1/node-pools/" + "a" * 64 + "/tokens", {}, "pool"),
    ],
)
async def test_a_bad_value_is_refused_naming_its_field(
    api: httpx.AsyncClient, store: Store, path: str, body: dict, field: str
) -> None:
    refused = await api.post(path, json=body)
    assert refused.status_code == 422 and error_of(refused)["field"] == field, refused.text
    assert store.node_pools.list() == []


async def test_the_bounds_themselves_are_accepted(api: httpx.AsyncClient) -> None:
    for body in ({"max_nodes": 1, "ttl_s": 60}, {"max_nodes": 10_000, "ttl_s": 30 * 86_400}):
        assert (await api.post("/v1/node-pools/gpu-a/tokens", json=body)).status_code == 201
    defaults = (await api.post("/v1/node-pools/gpu-a/tokens")).json()  # no body: 16 nodes for a day
    assert defaults["max_nodes"] == 16 and defaults["labels"] == {}


async def test_revoking_an_unknown_token_names_it(api: httpx.AsyncClient) -> None:
    missing = await api.post("/v1/node-pools/tokens/pt-000000000000/revoke")
    assert missing.status_code == 404 and error_of(missing)["field"] == "token_id"
    bad_pool = await api.get("/v1/node-pools/tokens", params={"pool": "No Such Pool!"})
    assert bad_pool.status_code == 422 and error_of(bad_pool)["field"] == "pool"


@pytest.fixture
def cli(app, monkeypatch: pytest.MonkeyPatch, admin_key: str):
    monkeypatch.setenv("BERTH_API_KEY", admin_key)
    monkeypatch.setattr(output, "Client", functools.partial(Client, transport=httpx.ASGITransport(app)))
    return lambda *argv: main([*argv, "--api", "http://berth"])


def test_berth_nodes_pool_token_create_list_and_revoke(cli, store: Store, capsys) -> None:
    assert cli("nodes", "pool-token", "create", "--pool", "gpu-h100", "--max-nodes", "32", "--ttl", "7d") == 0
    printed = capsys.readouterr()
    token = printed.out.strip()
    assert token.startswith("berth-pool_") and "\n" not in token  # alone on stdout, for a Secret
    assert "up to 32 nodes join pool gpu-h100" in printed.err
    [minted] = store.node_pools.list()

    assert cli("nodes", "pool-token", "list") == 0
    listed = capsys.readouterr().out
    assert minted.token_id in listed and "0/32" in listed and "live" in listed and token not in listed

    assert cli("nodes", "pool-token", "revoke", minted.token_id) == 0
    assert "revoked" in capsys.readouterr().out
    assert store.node_pools.list()[0].revoked_at is not None

    assert cli("nodes", "pool-token", "create", "--pool", "gpu-h100", "--ttl", "31d") == 2
    assert "ttl_s" in capsys.readouterr().err
    assert cli("nodes", "pool-token", "create", "--pool", "gpu-h100", "--ttl", "soon") == 2
    assert "ttl" in capsys.readouterr().err
