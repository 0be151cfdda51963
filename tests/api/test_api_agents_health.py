"""Agent registration and the health probes."""

from __future__ import annotations

import json

import httpx
import pytest
from api_helpers import error_of, unique

from orchestrator.api import TemporalGateway
from orchestrator.config import BerthConfig
from orchestrator.server import create_app
from orchestrator.store import Store


def agent_body(**fields: object) -> dict:
    body: dict = {
        "name": unique("scout"),
        "model": "llama-3.2-1b",
        "instructions": "Look around.",
        "tools": [{"name": "peek", "description": "Peek.", "parameters": {"type": "object", "properties": {}}}],
    }
    body.update(fields)
    return body


async def test_register_versions_an_agent_and_reregistering_is_a_no_op(api: httpx.AsyncClient, store: Store) -> None:
    body = agent_body()
    first = await api.post("/v1/agents", json=body)
    again = await api.post("/v1/agents", json=body)

    assert first.status_code == 201 and again.status_code == 200
    assert first.json()["version"] and first.json()["version"] == again.json()["version"]
    assert store.agents.versions(body["name"]) == [first.json()["version"]]

    changed = await api.post("/v1/agents", json={**body, "instructions": "Look harder."})
    assert changed.status_code == 201 and changed.json()["version"] != first.json()["version"]
    assert (await api.get(f"/v1/agents/{body['name']}")).json()["instructions"] == "Look harder."
    assert body["name"] in [a["name"] for a in (await api.get("/v1/agents")).json()]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"model": "no-such-model"}, "model"),
        ({"name": "Has Caps"}, "name"),
        ({"max_steps": 0}, "max_steps"),
        ({"tools": [{"name": "peek"}, {"name": "peek"}]}, "tools"),
        ({"tools": [{"name": "spawn_agent"}]}, "tools"),
        ({"tools": [{"name": "9lives"}]}, "tools.0.name"),
        ({"temperature": 0.2}, "temperature"),
    ],
    ids=[
        "unknown-model",
        "bad-name",
        "zero-steps",
        "duplicate-tools",
        "reserved-tool",
        "bad-tool-name",
        "unknown-field",
    ],
)
async def test_bad_agents_are_refused_naming_the_field(
    api: httpx.AsyncClient, store: Store, change: dict, field: str
) -> None:
    response = await api.post("/v1/agents", json=agent_body(**change))

    assert response.status_code == 422, response.text
    assert error_of(response)["field"] == field
    assert store.agents.list() == []


async def test_an_infinite_timeout_is_refused_naming_the_field(api: httpx.AsyncClient, store: Store) -> None:
    """Python's JSON parser reads Infinity; stored, it came back as null and the agent could not be read."""
    body = json.dumps(agent_body(ask_human_timeout_s=float("inf")))
    response = await api.post("/v1/agents", content=body, headers={"content-type": "application/json"})

    assert response.status_code == 422 and error_of(response)["field"] == "ask_human_timeout_s"
    assert store.agents.list() == []


async def test_unknown_agent_is_404(api: httpx.AsyncClient) -> None:
    response = await api.get(f"/v1/agents/{unique('ghost')}")
    assert response.status_code == 404 and error_of(response)["code"] == "not_found"


async def test_healthz_and_readyz_when_everything_is_up(api: httpx.AsyncClient) -> None:
    assert (await api.get("/healthz")).json() == {"status": "ok"}
    ready = await api.get("/readyz")
    assert ready.status_code == 200, ready.text
    assert ready.json()["checks"] == {"store": "ok", "temporal": "ok"}


async def test_readyz_says_temporal_is_down_while_the_rest_still_answers(
    config: BerthConfig, store: Store, closed_port: int, admin_key: str
) -> None:
    app = create_app(config, store, TemporalGateway(f"127.0.0.1:{closed_port}"))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app), base_url="http://berth", headers={"authorization": f"Bearer {admin_key}"}
    ) as api:
        ready = await api.get("/readyz")
        healthy = await api.get("/healthz")
        listing = await api.get("/v1/tasks")

    assert ready.status_code == 503
    body = ready.json()
    assert body["checks"]["store"] == "ok" and body["checks"]["temporal"] != "ok"
    assert body["error"]["code"] == "unavailable" and "temporal" in body["error"]["message"]
    assert healthy.status_code == 200 and listing.status_code == 200


async def test_readyz_says_the_store_is_down(config: BerthConfig, gateway: TemporalGateway, tmp_path) -> None:
    broken = Store.open(f"sqlite:///{tmp_path}/broken.db")
    with broken.engine.begin() as connection:
        connection.exec_driver_sql("DROP TABLE tasks")
    app = create_app(config, broken, gateway)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://berth") as api:
        ready = await api.get("/readyz")

    assert ready.status_code == 503
    assert ready.json()["checks"]["store"] != "ok" and ready.json()["checks"]["temporal"] == "ok"
