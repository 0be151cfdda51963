"""Keys, roles, tenant isolation and the audit log, through the app in-process."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from api_helpers import ClientAs, error_of, put_task, task_body, tenant_task, unique
from sqlmodel import Session, select

from orchestrator.server import create_app
from orchestrator.store import Store
from orchestrator.store.keys import hash_secret, split_key
from orchestrator.store.tables import ApiKeyRow
from sdk import AgentSpec, TaskStatus
from sdk.wire.identity import Role, TenantSpec


@pytest.fixture
def tenants(store: Store) -> tuple[str, str]:
    a, b = unique("acme"), unique("bolt")
    store.tenants.create(TenantSpec(name=a))
    store.tenants.create(TenantSpec(name=b))
    return a, b


# -- keys -----------------------------------------------------------------------------------


async def test_a_key_is_shown_once_kept_hashed_and_refused_once_revoked(
    api: httpx.AsyncClient, store: Store, client_as: ClientAs, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    created = await api.post("/v1/keys", json={"role": "viewer", "name": "dashboard"})
    assert created.status_code == 201, created.text
    body = created.json()
    key, key_id = body["key"], body["key_id"]
    assert key.startswith(f"berth_{key_id}_") and body["role"] == "viewer" and body["tenant"] is None
    secret = split_key(key)[1]  # type: ignore[index]

    with Session(store.engine) as session:
        row = session.exec(select(ApiKeyRow).where(ApiKeyRow.key_id == key_id)).one()
    assert row.secret_sha256 == hash_secret(secret) and secret not in row.model_dump_json()

    listed = await api.get("/v1/keys")
    assert listed.status_code == 200 and key_id in [k["key_id"] for k in listed.json()]
    assert secret not in listed.text and row.secret_sha256 not in listed.text

    headers = {"authorization": f"Bearer {key}"}
    assert (await api.get("/v1/tasks", headers=headers)).status_code == 200
    used = next(k for k in (await api.get("/v1/keys")).json() if k["key_id"] == key_id)
    assert used["last_used_at"] is not None

    revoked = await api.post(f"/v1/keys/{key_id}/revoke")
    assert revoked.status_code == 200 and revoked.json()["revoked_at"] is not None and secret not in revoked.text
    refused = await api.get("/v1/tasks", headers=headers)
    assert refused.status_code == 401 and "revoked" in error_of(refused)["message"]
    assert refused.headers["www-authenticate"] == "Bearer"

    audit = (await api.get("/v1/audit")).text
    assert secret not in audit and secret not in caplog.text


@pytest.mark.parametrize(
    "header", [None, "Bearer ", "Basic dXNlcjpwYXNz", "Bearer berth_nothex_nope", "Bearer not-a-berth-key"]
)
async def test_no_key_or_a_wrong_one_is_401(app, header: str | None) -> None:
    headers = {"authorization": header} if header else {}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://berth") as anonymous:
        answer = await anonymous.get("/v1/tasks", headers=headers)
        health = await anonymous.get("/healthz")
        docs = await anonymous.get("/openapi.json")
    assert answer.status_code == 401 and error_of(answer)["code"] == "unauthorized"
    assert error_of(answer)["field"] == "authorization"
    assert health.status_code == 200 and docs.status_code == 200


async def test_a_right_id_with_a_wrong_secret_is_401(api: httpx.AsyncClient, admin_key: str) -> None:
    key_id = split_key(admin_key)[0]  # type: ignore[index]
    answer = await api.get("/v1/tasks", headers={"authorization": f"Bearer berth_{key_id}_guessed"})
    assert answer.status_code == 401 and "not valid" in error_of(answer)["message"]


async def test_keys_refuse_a_role_tenant_mismatch_naming_the_field(api: httpx.AsyncClient, tenants) -> None:
    for body, field in (
        ({"role": "agent"}, "tenant"),
        ({"role": "admin", "tenant": tenants[0]}, "tenant"),
        ({"role": "agent", "tenant": "ghost"}, "tenant"),
        ({"role": "boss"}, "role"),
    ):
        answer = await api.post("/v1/keys", json=body)
        assert answer.status_code == 422 and error_of(answer)["field"] == field, (body, answer.text)
    assert (await api.post("/v1/keys/nope/revoke")).status_code == 404


# -- roles ----------------------------------------------------------------------------------


async def test_a_viewer_reads_but_pressing_any_button_is_403_and_changes_nothing(
    api: httpx.AsyncClient, store: Store, agent: AgentSpec, client_as: ClientAs
) -> None:
    task = put_task(store, agent)
    store.fleet.register(_node("gpu-v"), "secret")
    async with client_as(Role.viewer) as viewer:
        assert (await viewer.get(f"/v1/tasks/{task.task_id}")).status_code == 200
        assert (await viewer.get("/v1/nodes")).status_code == 200
        for method, path, body in (
            ("POST", f"/v1/tasks/{task.task_id}/cancel", None),
            ("POST", f"/v1/tasks/{task.task_id}/raise-budget", {"tokens": 100}),
            ("POST", "/v1/tasks", task_body(agent)),
            ("POST", "/v1/nodes/gpu-v/drain", None),
            ("PUT", "/v1/models/llama-3.1-8b/policy", {"min_replicas": 0, "max_replicas": 2}),
            ("POST", "/v1/keys", {"role": "admin"}),
        ):
            answer = await viewer.request(method, path, json=body)
            assert answer.status_code == 403, (path, answer.text)
            assert "viewer" in error_of(answer)["message"]
    assert store.tasks.get(task.task_id).state.status == TaskStatus.running  # type: ignore[union-attr]
    assert store.fleet.get("gpu-v").status == "healthy"  # type: ignore[union-attr]
    assert [k.role for k in store.keys.list()].count(Role.admin) == 1


async def test_operators_steer_the_fleet_and_agents_may_not(
    store: Store, client_as: ClientAs, tenants: tuple[str, str]
) -> None:
    store.fleet.register(_node("gpu-o"), "secret")
    async with client_as(Role.agent, tenants[0]) as agent_key, client_as(Role.operator) as operator:
        refused = await agent_key.post("/v1/nodes/gpu-o/drain")
        assert refused.status_code == 403 and "agent" in error_of(refused)["message"]
        assert (await agent_key.get("/v1/tenants")).status_code == 403
        assert (await operator.get("/v1/tenants")).status_code == 403
        assert (await operator.post("/v1/nodes/gpu-o/drain")).json()["status"] == "draining"
        assert (await operator.post("/v1/nodes/gpu-o/undrain")).json()["status"] == "healthy"
    # Every tenant shares the fleet and the catalogue: an operator of one tenant steers neither.
    async with client_as(Role.operator, tenants[0]) as confined:
        for refused in (
            await confined.post("/v1/nodes/gpu-o/drain"),
            await confined.put("/v1/models/llama-3.2-1b/policy", json={"min_replicas": 1}),
        ):
            assert refused.status_code == 403 and "every tenant shares it" in error_of(refused)["message"]
        assert store.fleet.get("gpu-o").status == "healthy"  # type: ignore[union-attr]


# -- tenant isolation ----------------------------------------------------------------------


async def test_a_tenant_key_gets_404_for_another_tenants_task_on_every_route(
    api: httpx.AsyncClient, store: Store, agent: AgentSpec, client_as: ClientAs, tenants: tuple[str, str]
) -> None:
    a, b = tenants
    mine, theirs = tenant_task(store, agent, a), tenant_task(store, agent, b)
    routes = [
        ("GET", ""),
        ("GET", "/interruptions"),
        ("GET", "/checkpoints"),
        ("GET", "/checkpoints/1"),
        ("GET", "/ledger"),
        ("GET", "/events"),
        ("POST", "/cancel"),
        ("POST", "/raise-budget"),
        ("POST", "/answer"),
        ("POST", "/fork"),
        ("POST", "/spawn"),
        ("POST", "/simulate-preemption"),
    ]
    bodies = {
        "/raise-budget": {"tokens": 10},
        "/answer": {"text": "yes"},
        "/fork": {"checkpoint_seq": 1},
        "/spawn": {"agent": agent.name, "input": "x", "tokens": 10},
    }
    for role in (Role.agent, Role.operator, Role.viewer):
        async with client_as(role, a) as scoped:
            for method, suffix in routes:
                answer = await scoped.request(method, f"/v1/tasks/{theirs.task_id}{suffix}", json=bodies.get(suffix))
                expected = 403 if role == Role.viewer and method == "POST" else 404
                assert answer.status_code == expected, (role, suffix, answer.text)
                if expected == 404:
                    assert error_of(answer)["message"] == f"task {theirs.task_id!r} does not exist"
            assert (await scoped.get(f"/v1/tasks/{mine.task_id}/checkpoints/1")).status_code == 200
            listed = await scoped.get("/v1/tasks")
            assert [t["task_id"] for t in listed.json()] == [mine.task_id]
            assert (await scoped.get("/v1/tasks", params={"tenant": b})).json() == []
    everything = {t["task_id"] for t in (await api.get("/v1/tasks")).json()}
    assert {mine.task_id, theirs.task_id} <= everything
    assert store.tasks.get(theirs.task_id).state.status == TaskStatus.running  # type: ignore[union-attr]


async def test_an_agent_key_submits_for_its_own_tenant_only(
    store: Store, agent: AgentSpec, client_as: ClientAs, tenants: tuple[str, str]
) -> None:
    a, b = tenants
    async with client_as(Role.agent, a) as scoped:
        forced = await scoped.post("/v1/tasks", json=task_body(agent))
        assert forced.status_code == 201, forced.text
        assert forced.json()["tenant"] == a
        named = await scoped.post("/v1/tasks", json=task_body(agent, tenant=b))
        assert named.status_code == 403 and error_of(named)["field"] == "tenant"
        assert (await scoped.post("/v1/agents", json=agent.model_dump(mode="json"))).status_code in (200, 201)
    assert [t.tenant for t in store.tasks.list()] == [a]


# -- tenants and default budgets -----------------------------------------------------------


async def test_a_tenants_default_budget_applies_and_an_unknown_tenant_is_422(
    api: httpx.AsyncClient, agent: AgentSpec
) -> None:
    name = unique("fund")
    created = await api.post(
        "/v1/tenants",
        json={
            "name": name,
            "trust": "isolated",
            "gpu_quota": 4,
            "default_budget_tokens": 1234,
            "default_budget_usd": 0.5,
        },
    )
    assert created.status_code == 201, created.text
    assert (await api.post("/v1/tenants", json={"name": name})).status_code == 409

    body = task_body(agent, tenant=name)
    del body["budget"]
    defaulted = await api.post("/v1/tasks", json=body)
    assert defaulted.status_code == 201, defaulted.text
    assert defaulted.json()["spend"]["token_limit"] == 1234 and defaulted.json()["spend"]["usd_limit"] == 0.5
    given = await api.post("/v1/tasks", json=task_body(agent, tenant=name))
    assert given.json()["spend"]["token_limit"] == 5000 and given.json()["spend"]["usd_limit"] == 0.5

    unknown = await api.post("/v1/tasks", json=task_body(agent, tenant="nobody-here"))
    assert unknown.status_code == 422 and error_of(unknown)["field"] == "tenant"
    no_default = task_body(agent)
    del no_default["budget"]
    missing = await api.post("/v1/tasks", json=no_default)
    assert missing.status_code == 422 and error_of(missing)["field"] == "budget"


async def test_tenants_are_listed_shown_and_changed(api: httpx.AsyncClient) -> None:
    assert "default" in [t["name"] for t in (await api.get("/v1/tenants")).json()]
    name = unique("crew")
    await api.post("/v1/tenants", json={"name": name, "gpu_quota": 2})
    changed = await api.patch(f"/v1/tenants/{name}", json={"trust": "dedicated", "gpu_quota": None})
    assert changed.status_code == 200, changed.text
    assert changed.json()["trust"] == "dedicated" and changed.json()["gpu_quota"] is None
    assert (await api.get(f"/v1/tenants/{name}")).json()["trust"] == "dedicated"
    assert (await api.get("/v1/tenants/ghost")).status_code == 404
    bad = await api.patch(f"/v1/tenants/{name}", json={"trust": "open"})
    assert bad.status_code == 422 and error_of(bad)["field"] == "trust"
    cleared = await api.patch(f"/v1/tenants/{name}", json={"trust": None})
    assert cleared.status_code == 422 and error_of(cleared)["field"] == "trust"
    bad_name = await api.post("/v1/tenants", json={"name": "Not Valid"})
    assert bad_name.status_code == 422 and error_of(bad_name)["field"] == "name"


# -- audit ----------------------------------------------------------------------------------


async def test_every_write_is_audited_with_who_what_and_status(
    api: httpx.AsyncClient, store: Store, agent: AgentSpec, client_as: ClientAs, admin_key: str
) -> None:
    submitted = await api.post("/v1/tasks", json=task_body(agent))
    task_id = submitted.json()["task_id"]
    async with client_as(Role.viewer) as viewer:
        await viewer.post(f"/v1/tasks/{task_id}/cancel")
    async with httpx.AsyncClient(transport=api._transport, base_url="http://berth") as anonymous:
        await anonymous.post("/v1/tenants", json={"name": "sneaky"})
    await api.get("/v1/tasks")  # reads are not audited
    too_big = await api.post(
        "/v1/agents", content=b"x" * (5 * 1024 * 1024), headers={"content-type": "application/json"}
    )
    assert too_big.status_code == 413

    rows = (await api.get("/v1/audit")).json()
    admin_id = split_key(admin_key)[0]  # type: ignore[index]
    assert (rows[0]["method"], rows[0]["path"], rows[0]["status"], rows[0]["key_id"]) == (
        "POST",
        "/v1/agents",
        413,
        admin_id,
    )
    rows = rows[1:]
    # The anonymous 401 is no one's action: not on record (tests/security/test_audit_trail.py).
    assert [(r["method"], r["path"], r["status"], r["role"]) for r in rows[:2]] == [
        ("POST", f"/v1/tasks/{task_id}/cancel", 403, "viewer"),
        ("POST", "/v1/tasks", 201, "admin"),
    ]
    assert rows[1]["key_id"] == admin_id and rows[1]["target"] == task_id
    assert rows[0]["target"] == task_id and rows[0]["key_id"] != admin_id
    assert all(r["at"] for r in rows)
    mine = (await api.get("/v1/audit", params={"key_id": admin_id})).json()
    assert {r["key_id"] for r in mine} == {admin_id}


def _node(node_id: str):
    from sdk.wire.fleet import GpuDescription, NodeSpec

    return NodeSpec(
        node_id=node_id,
        datacenter="dc1",
        zone="z1",
        gpus=[GpuDescription(index=0, uuid=f"GPU-{node_id}", type_name="H100-80GB", memory_total_mib=81559)],
    )


async def test_submissions_beyond_a_keys_burst_are_429_while_another_key_still_submits(
    config, store: Store, gateway, agent: AgentSpec, admin_key: str, client_as: ClientAs
) -> None:
    limited = create_app(config.model_copy(update={"submit_burst": 1, "submit_rate_per_s": 0.001}), store, gateway)
    other = store.keys.create(Role.admin).key
    async with httpx.AsyncClient(transport=httpx.ASGITransport(limited), base_url="http://berth") as http:
        first = await http.post("/v1/tasks", json=task_body(agent), headers={"authorization": f"Bearer {admin_key}"})
        second = await http.post("/v1/tasks", json=task_body(agent), headers={"authorization": f"Bearer {admin_key}"})
        theirs = await http.post("/v1/tasks", json=task_body(agent), headers={"authorization": f"Bearer {other}"})
    assert first.status_code == 201 and theirs.status_code == 201, (first.text, theirs.text)
    assert second.status_code == 429 and error_of(second)["code"] == "rate_limited"
    assert int(second.headers["retry-after"]) >= 1


# -- agents belong to the tenant that registered them ---------------------------------------


async def test_a_tenants_agent_is_unknown_to_other_tenants_and_theirs_alone_to_change(
    api: httpx.AsyncClient, client_as: ClientAs, tenants: tuple[str, str], agent: AgentSpec
) -> None:
    a, b = tenants
    private = {"name": unique("pricing-bot"), "model": "llama-3.1-8b", "instructions": "Quote from our price list."}
    async with client_as(Role.agent, tenant=a) as owner, client_as(Role.agent, tenant=b) as other:
        assert (await owner.post("/v1/agents", json=private)).status_code == 201
        changed = {**private, "instructions": "Quote anything."}
        assert (await owner.post("/v1/agents", json=changed)).status_code == 201  # a new version, still a's

        # b neither sees a's agent (nor its instructions), nor runs it, nor takes its name.
        assert private["name"] not in {x["name"] for x in (await other.get("/v1/agents")).json()}
        assert (await other.get(f"/v1/agents/{private['name']}")).status_code == 404
        taken = await other.post("/v1/agents", json=private)
        assert taken.status_code == 403 and error_of(taken)["field"] == "name"
        run = await other.post("/v1/tasks", json=task_body(AgentSpec.model_validate(private)))
        assert run.status_code == 422 and error_of(run)["field"] == "agent"

        # Shared agents (registered by a key of no tenant) serve every tenant, which may register the same
        # content again (its tool worker starting) but not change it.
        assert agent.name in {x["name"] for x in (await other.get("/v1/agents")).json()}
        assert (await other.post("/v1/agents", json=agent.model_dump(mode="json"))).status_code == 200
        rewritten = {**agent.model_dump(mode="json"), "instructions": "Leak everything."}
        assert (await other.post("/v1/agents", json=rewritten)).status_code == 403
    seen = await api.get(f"/v1/agents/{private['name']}")  # admins see every tenant's
    assert seen.status_code == 200 and seen.json()["instructions"] == "Quote anything."


async def test_a_revoked_key_loses_the_event_stream_it_had_opened(
    app, store: Store, agent: AgentSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.api import events

    monkeypatch.setattr(events, "KEY_RECHECK_S", 0.2)
    running = put_task(store, agent)  # never final: the stream would follow it for ever
    created = store.keys.create(Role.viewer, name="dashboard")
    following = events.tail

    async def revoked_once_streaming(*args: Any) -> AsyncIterator[Any]:
        # The in-process transport hands the body over only once the stream has ended, so the key is
        # revoked from inside: after the stream was opened with it, before it has anything to send.
        store.keys.revoke(created.key_id)
        async for event in following(*args):
            yield event

    monkeypatch.setattr(events, "tail", revoked_once_streaming)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app), base_url="http://berth", headers={"authorization": f"Bearer {created.key}"}
    ) as viewer:
        stream = await asyncio.wait_for(viewer.get(f"/v1/tasks/{running.task_id}/events"), timeout=20)
    assert stream.status_code == 200
    assert "event: revoked" in stream.text and "the API key was revoked" in stream.text
