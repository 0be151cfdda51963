"""A leaked cluster join token, played by a rogue that registers node after node with it.

It once filled the list of nodes waiting for approval (256 in 12 s), after which every legitimate cluster-token
join got 409 until an operator cleaned up, and `GET /v1/nodes` showed the rogue's nodes to every key, a tenant's
agent key included. Here the list is small (3 places), the rogue fills it, and a legitimate node is told when a
place frees, gets in once one does, and no tenant's key sees any of it.
"""

from __future__ import annotations

import asyncio
import re
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from sqlalchemy import update
from sqlmodel import Session, col

from orchestrator.config import BerthConfig
from orchestrator.node import control_plane
from orchestrator.node.control_plane import ControlPlane
from orchestrator.store import Store
from orchestrator.store.tables import NodeRow, utcnow
from sdk.wire.fleet import NodeRegistration
from sdk.wire.identity import Role
from tests.security.parties import JOIN_TOKEN, error_of
from tests.security.test_node_admission import SECRET_HEADER, heartbeat, registration

PLACES = 3
TTL_S = 600.0


@pytest.fixture
def config(tmp_path: Path) -> BerthConfig:
    return BerthConfig(
        data_dir=tmp_path,
        database_url=f"sqlite:///{tmp_path}/berth.db",
        join_token=JOIN_TOKEN,
        pending_nodes_max=PLACES,
        pending_node_ttl_s=TTL_S,
    )


async def _flood(api: httpx.AsyncClient) -> dict[str, str]:
    """The rogue fills every place; its nodes' secrets by id."""
    secrets = {}
    for i in range(PLACES):
        joined = await api.post("/v1/nodes/register", json=registration(f"rogue-{i}"))
        assert joined.status_code == 201 and joined.json()["node"]["status"] == "pending", joined.text
        secrets[f"rogue-{i}"] = joined.json()["node_secret"]
    return secrets


def _age(store: Store, node_ids: list[str], seconds: float) -> None:
    """Those nodes joined `seconds` ago (as if the clock had moved on)."""
    with Session(store.engine) as session:
        session.exec(
            update(NodeRow)
            .where(col(NodeRow.node_id).in_(node_ids))
            .values(registered_at=utcnow() - timedelta(seconds=seconds))
        )
        session.commit()


async def test_a_full_list_refuses_a_join_with_when_a_place_frees_and_a_per_node_token_still_admits(
    api: httpx.AsyncClient,
) -> None:
    await _flood(api)
    refused = await api.post("/v1/nodes/register", json=registration("honest"))
    assert refused.status_code == 429 and error_of(refused)["field"] == "join_token", refused.text
    message = error_of(refused)["message"]
    assert f"pending_nodes_max {PLACES}" in message and "next place frees at" in message
    assert TTL_S - 5 <= int(refused.headers["retry-after"]) <= TTL_S
    assert "rogue" not in message  # the refusal tells a stranger nothing of who waits

    token = (await api.post("/v1/nodes/honest/admit")).json()["join_token"]
    admitted = await api.post("/v1/nodes/register", json=registration("honest", token))
    assert admitted.status_code == 201 and admitted.json()["node"]["status"] == "healthy"


async def test_a_node_waiting_past_its_time_is_dropped_and_its_place_goes_to_the_next_join(
    api: httpx.AsyncClient, store: Store
) -> None:
    secrets = await _flood(api)
    _age(store, ["rogue-0"], TTL_S + 1)
    honest = await api.post("/v1/nodes/register", json=registration("honest"))
    assert honest.status_code == 201 and honest.json()["node"]["status"] == "pending", honest.text
    listed = {n["node_id"] for n in (await api.get("/v1/nodes")).json()}
    assert listed == {"honest", "rogue-1", "rogue-2"}
    dropped = await api.post(
        "/v1/nodes/rogue-0/heartbeat", json=heartbeat("rogue-0"), headers={SECRET_HEADER: secrets["rogue-0"]}
    )
    assert dropped.status_code == 401  # its secret died with it: it must join again, at the back of the list

    _age(store, ["rogue-1", "rogue-2"], TTL_S + 1)  # no join since: the listing drops them
    assert [n["node_id"] for n in (await api.get("/v1/nodes", params={"status": "pending"})).json()] == ["honest"]


async def test_a_waiting_node_that_registers_again_keeps_its_place_and_its_clock(
    api: httpx.AsyncClient, store: Store
) -> None:
    secrets = await _flood(api)
    _age(store, ["rogue-0"], TTL_S - 60)
    with Session(store.engine) as session:
        joined_at = session.get(NodeRow, "rogue-0").registered_at  # type: ignore[union-attr]
    again = await api.post(
        "/v1/nodes/register", json=registration("rogue-0"), headers={SECRET_HEADER: secrets["rogue-0"]}
    )
    assert again.status_code == 200, again.text  # a full list does not refuse a node already in it...
    with Session(store.engine) as session:
        assert session.get(NodeRow, "rogue-0").registered_at == joined_at  # type: ignore[union-attr]
    # ...and registering again does not restart its time: it still ages out when its first join says.


async def test_a_legitimate_agent_waits_for_a_place_and_joins_as_soon_as_one_frees(
    app, api: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(control_plane, "_FULL_LIST_RETRY_MAX_S", 0.05)
    await _flood(api)
    async with ControlPlane("http://berth", transport=httpx.ASGITransport(app)) as cp:
        joining = asyncio.create_task(cp.register(NodeRegistration.model_validate(registration("honest"))))
        await asyncio.sleep(0.3)
        assert not joining.done()  # waiting, not given up
        assert (await api.delete("/v1/nodes/rogue-1")).status_code == 200  # an operator removes one
        joined = await asyncio.wait_for(joining, 5)
    assert joined.node.node_id == "honest" and joined.node.status == "pending"


@pytest.mark.parametrize(
    "role, tenant", [(Role.agent, "default"), (Role.viewer, "default"), (Role.operator, "default")]
)
async def test_no_tenants_key_sees_the_fleet(
    api: httpx.AsyncClient, client_as, role: Role, tenant: str, store: Store
) -> None:
    await _flood(api)
    token = (await api.post("/v1/nodes/gpu-a/admit")).json()["join_token"]
    await api.post("/v1/nodes/register", json=registration("gpu-a", token))
    async with client_as(role, tenant) as tenants_key:
        for path in ("/v1/nodes", "/v1/nodes/gpu-a", "/v1/nodes/rogue-0", "/v1/replicas"):
            refused = await tenants_key.get(path)
            assert refused.status_code == 403 and error_of(refused)["field"] == "authorization", (path, refused.text)
            assert "rogue" not in refused.text and "gpu-a" not in refused.text


@pytest.mark.parametrize("role", [Role.admin, Role.operator, Role.viewer])
async def test_keys_of_no_tenant_that_run_or_watch_the_fleet_see_it(
    api: httpx.AsyncClient, client_as, role: Role
) -> None:
    await _flood(api)
    async with client_as(role, None) as fleet_key:
        listed = await fleet_key.get("/v1/nodes", params={"status": "pending"})
        assert listed.status_code == 200 and len(listed.json()) == PLACES
        assert (await fleet_key.get("/v1/nodes/rogue-0")).json()["status"] == "pending"
        assert (await fleet_key.get("/v1/replicas")).status_code == 200


@pytest.mark.parametrize("setting", [{"pending_nodes_max": 0}, {"pending_node_ttl_s": 10}, {"pending_node_ttl_s": 1e9}])
def test_the_list_settings_are_bounded(setting: dict) -> None:
    with pytest.raises(ValueError, match=next(iter(setting))):
        BerthConfig(**setting)


@pytest.mark.parametrize("role", [Role.agent, Role.operator])
async def test_no_tenants_key_sees_the_fleet_in_the_admin_ui_either(
    app, api: httpx.AsyncClient, client_as, role: Role
) -> None:
    await _flood(api)
    async with client_as(role, "default") as key_holder:
        key = key_holder.headers["authorization"].removeprefix("Bearer ")
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://berth") as browser:
        form = await browser.get("/login")
        token = re.search(r'name="csrf_token" value="([^"]+)"', form.text).group(1)  # type: ignore[union-attr]
        assert (await browser.post("/login", data={"api_key": key, "csrf_token": token})).status_code == 303
        for path in ("/fleet", "/panels/fleet"):
            page = await browser.get(path)
            assert page.status_code == 403 and "rogue-0" not in page.text, path
