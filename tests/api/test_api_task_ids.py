"""A chosen task id round-trips: `X`, submitted by a tenant's key, is stored as `<tenant>:X`, and the bare `X` names
that task on every task route for that tenant's keys, while another tenant's id, bare or qualified, answers as a
missing one and a key of every tenant must qualify a chosen id."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx
from api_helpers import ClientAs, error_of, unique
from ui_helpers import SignIn

from orchestrator.store import Store
from sdk import AgentSpec, Spend, TaskSpec, TaskState, TaskStatus
from sdk.wire.identity import Role, TenantSpec

READS = ("", "/interruptions", "/checkpoints", "/ledger", "/writing")


async def _submit(http: httpx.AsyncClient, agent: AgentSpec, chosen: str) -> str:
    submitted = await http.post(
        "/v1/tasks",
        json={"agent": agent.name, "input": "Count the crates.", "budget": {"tokens": 5000}, "task_id": chosen},
    )
    assert submitted.status_code == 201, submitted.text
    return submitted.json()["task_id"]


def _child_of(store: Store, agent: AgentSpec, parent: str) -> str:
    """A sub-agent's row of `parent`, as the parent's workflow lists it."""
    task_id = f"{parent}~x1.{unique('c')}"
    tenant = parent.split(":")[0]
    spec = TaskSpec(task_id=task_id, agent=agent.name, input="Count.", budget={"tokens": 500}, tenant=tenant)
    state = TaskState(
        task_id=task_id,
        agent=agent.name,
        agent_version=agent.version,
        model=agent.model,
        tenant=tenant,
        status=TaskStatus.running,
        max_steps=agent.max_steps,
        spend=Spend(token_limit=500),
        updated_at=datetime.now(UTC),
        parent_task_id=parent,
    )
    assert store.tasks.create(task_id, spec.model_dump_json(), state)
    return task_id


async def test_a_tenants_bare_chosen_id_names_its_task_on_every_task_route(
    client_as: ClientAs, store: Store, agent: AgentSpec
) -> None:
    store.tenants.create(TenantSpec(name="acme"))
    chosen = unique("crates")
    async with client_as(Role.operator, tenant="acme") as http:
        task_id = await _submit(http, agent, chosen)
        assert task_id == f"acme:{chosen}"
        for read in READS:
            bare, full = await http.get(f"/v1/tasks/{chosen}{read}"), await http.get(f"/v1/tasks/{task_id}{read}")
            assert bare.status_code == full.status_code == 200, (read, bare.text)
            if read != "":  # the state's updated_at may move between two reads
                assert bare.json() == full.json(), read
        assert (await http.get(f"/v1/tasks/{chosen}")).json()["task_id"] == task_id  # responses give the full id
        child = _child_of(store, agent, task_id)
        listed = await http.get("/v1/tasks", params={"parent": chosen})
        assert [t["task_id"] for t in listed.json()] == [child]
        assert (await http.get(f"/v1/tasks/{child.removeprefix('acme:')}")).json()["task_id"] == child

        cancelled = await http.post(f"/v1/tasks/{chosen}/cancel", json={"reason": "no crates today"})
        assert cancelled.status_code == 202, cancelled.text
        assert cancelled.json()["task_id"] == task_id


async def test_another_tenants_id_bare_or_qualified_answers_as_a_missing_one(
    client_as: ClientAs, store: Store, agent: AgentSpec
) -> None:
    for tenant in ("acme", "globex"):
        store.tenants.create(TenantSpec(name=tenant))
    chosen = unique("crates")
    async with client_as(Role.operator, tenant="acme") as acme, client_as(Role.operator, tenant="globex") as globex:
        mine, theirs = await _submit(acme, agent, chosen), await _submit(globex, agent, chosen)
        assert (mine, theirs) == (f"acme:{chosen}", f"globex:{chosen}")
        assert (await acme.get(f"/v1/tasks/{chosen}")).json()["task_id"] == mine  # each tenant's own X
        assert (await globex.get(f"/v1/tasks/{chosen}")).json()["task_id"] == theirs

        ghost = f"globex:{unique('ghost')}"
        for read in READS:
            refused, missing = await acme.get(f"/v1/tasks/{theirs}{read}"), await acme.get(f"/v1/tasks/{ghost}{read}")
            assert refused.status_code == missing.status_code == 404, refused.text
            assert error_of(refused) == {
                **error_of(missing),
                "message": error_of(missing)["message"].replace(ghost, theirs),
            }
        refused = await acme.post(f"/v1/tasks/{theirs}/cancel", json={"reason": "not mine"})
        assert refused.status_code == 404 and error_of(refused)["message"] == f"task {theirs!r} does not exist"
        assert (await globex.get(f"/v1/tasks/{theirs}")).json()["status"] == TaskStatus.queued.value


async def test_a_key_of_every_tenant_must_qualify_a_chosen_id(
    api: httpx.AsyncClient, client_as: ClientAs, store: Store, agent: AgentSpec
) -> None:
    store.tenants.create(TenantSpec(name="acme"))
    chosen = unique("crates")
    async with client_as(Role.operator, tenant="acme") as http:
        task_id = await _submit(http, agent, chosen)
    refused = await api.get(f"/v1/tasks/{chosen}")
    assert refused.status_code == 404
    error = error_of(refused)
    assert error["field"] == "task_id" and f"'<tenant>:{chosen}'" in error["message"], error
    assert (await api.get(f"/v1/tasks/{task_id}")).status_code == 200


async def test_a_task_token_reads_its_task_by_the_bare_id_and_still_may_not_cancel_it(
    app, client_as: ClientAs, store: Store, agent: AgentSpec
) -> None:
    store.tenants.create(TenantSpec(name="acme"))
    chosen = unique("crates")
    async with client_as(Role.operator, tenant="acme") as http:
        task_id = await _submit(http, agent, chosen)
        store.tasks.save_state(store.tasks.get(task_id).state.model_copy(update={"status": TaskStatus.running}))
        token = (await http.post(f"/v1/tasks/{chosen}/token")).json()["key"]
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app), base_url="http://berth", headers={"authorization": f"Bearer {token}"}
    ) as own:
        assert (await own.get(f"/v1/tasks/{chosen}")).json()["task_id"] == task_id
        refused = await own.post(f"/v1/tasks/{chosen}/cancel", json={"reason": "stop myself"})
        assert refused.status_code == 403 and error_of(refused)["field"] == "authorization", refused.text


async def test_the_task_page_takes_the_id_a_tenant_chose(
    client_as: ClientAs, sign_in: SignIn, store: Store, agent: AgentSpec
) -> None:
    store.tenants.create(TenantSpec(name="acme"))
    chosen = unique("crates")
    async with client_as(Role.operator, tenant="acme") as http:
        task_id = await _submit(http, agent, chosen)
    page = await (await sign_in(Role.viewer, tenant="acme")).get(f"/tasks/{chosen}")
    assert page.status_code == 200 and task_id in page.text
    assert (await (await sign_in(Role.viewer, tenant="globex")).get(f"/tasks/{task_id}")).status_code == 404
