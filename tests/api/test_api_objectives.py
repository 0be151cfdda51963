"""Latency objectives over HTTP: set per tenant, per agent and per task, refused naming the field when out of
bounds, resolved at submission (task over agent over tenant over the class's default) into the workflow's input,
and shown by the task's state, the task list and the UI's task and tenants pages."""

from __future__ import annotations

import httpx
import pytest
from api_helpers import error_of, started_run, task_body, unique
from temporalio.client import Client as TemporalClient
from ui_helpers import SignIn

from orchestrator.store import Store
from sdk import AgentSpec, LatencyObjectives
from sdk.wire.objectives import DEFAULT_OBJECTIVES


async def _tenant(api: httpx.AsyncClient, **objectives: float) -> str:
    name = unique("acme")
    response = await api.post("/v1/tenants", json={"name": name, "objectives": objectives})
    assert response.status_code == 201, response.text
    return name


async def _agent(api: httpx.AsyncClient, **objectives: float) -> AgentSpec:
    body = {"name": unique("writer"), "model": "llama-3.1-8b", "objectives": objectives}
    response = await api.post("/v1/agents", json=body)
    assert response.status_code == 201, response.text
    return AgentSpec.model_validate(response.json())


async def test_each_objective_comes_from_the_task_else_its_agent_else_its_tenant_else_its_class(
    api: httpx.AsyncClient, store: Store, temporal_client: TemporalClient
) -> None:
    tenant = await _tenant(api, ttft_s=3.0, tpot_s=0.2, attainment=0.9)
    patched = await api.patch(f"/v1/tenants/{tenant}", json={"objectives": {"deadline_s": 900, "attainment": None}})
    assert patched.json()["objectives"] == {
        "ttft_s": 3.0,
        "tpot_s": 0.2,
        "deadline_s": 900.0,
        "attainment": None,
    }  # merged: the fields sent changed, the others stayed
    agent = await _agent(api, ttft_s=2.0, tpot_s=0.1)

    submitted = await api.post("/v1/tasks", json=task_body(agent, tenant=tenant, objectives={"ttft_s": 0.5}))

    assert submitted.status_code == 201, submitted.text
    expected = LatencyObjectives(
        ttft_s=0.5, tpot_s=0.1, deadline_s=900.0, attainment=DEFAULT_OBJECTIVES["interactive"].attainment
    )
    task_id = submitted.json()["task_id"]
    assert LatencyObjectives.model_validate(submitted.json()["objectives"]) == expected
    assert (await started_run(temporal_client, task_id)).objectives == expected  # the workflow's input
    shown = await api.get(f"/v1/tasks/{task_id}")
    assert LatencyObjectives.model_validate(shown.json()["objectives"]) == expected
    listed = (await api.get("/v1/tasks", params={"tenant": tenant})).json()
    assert [LatencyObjectives.model_validate(t["objectives"]) for t in listed] == [expected]
    # A batch task of the same tenant and agent sets nothing itself: the agent's, the tenant's, then batch's.
    batch = await api.post("/v1/tasks", json=task_body(agent, tenant=tenant, service_class="batch"))
    assert LatencyObjectives.model_validate(batch.json()["objectives"]) == LatencyObjectives(
        ttft_s=2.0, tpot_s=0.1, deadline_s=900.0, attainment=DEFAULT_OBJECTIVES["batch"].attainment
    )


async def test_a_task_of_no_settings_gets_its_classs_defaults(
    api: httpx.AsyncClient, agent: AgentSpec, temporal_client: TemporalClient
) -> None:
    submitted = await api.post("/v1/tasks", json=task_body(agent, service_class="low_priority"))
    assert submitted.json()["objectives"] == DEFAULT_OBJECTIVES["low_priority"].model_dump()
    assert (await started_run(temporal_client, submitted.json()["task_id"])).objectives == LatencyObjectives()


@pytest.mark.parametrize(
    ("method", "path", "body", "field", "reason"),
    [
        ("POST", "/v1/tasks", {"ttft_s": 0}, "objectives.ttft_s", "greater than 0"),
        ("POST", "/v1/tasks", {"tpot_s": 11}, "objectives.tpot_s", "less than or equal to 10"),
        ("POST", "/v1/tasks", {"attainment": 1.5}, "objectives.attainment", "less than or equal to 0.9999"),
        ("POST", "/v1/tasks", {"p99_s": 1}, "objectives.p99_s", "Extra inputs are not permitted"),
        ("PATCH", "/v1/tenants/default", {"deadline_s": -1}, "objectives.deadline_s", "greater than 0"),
        ("POST", "/v1/agents", {"ttft_s": "soon"}, "objectives.ttft_s", "valid number"),
    ],
    ids=["task-ttft-zero", "task-tpot-too-slow", "task-attainment-over-1", "task-unknown", "tenant", "agent"],
)
async def test_a_bad_objective_is_refused_naming_the_field_and_why(
    api: httpx.AsyncClient,
    store: Store,
    agent: AgentSpec,
    method: str,
    path: str,
    body: dict,
    field: str,
    reason: str,
) -> None:
    whole = {
        "/v1/tasks": task_body(agent),
        "/v1/tenants/default": {},
        "/v1/agents": {"name": unique("writer"), "model": "llama-3.1-8b"},
    }[path]

    response = await api.request(method, path, json={**whole, "objectives": body})

    assert response.status_code == 422, response.text
    error = error_of(response)
    assert (error["field"], error["code"]) == (field, "invalid")
    assert reason in error["message"]
    assert store.tasks.list() == [] and store.tenants.get("default").objectives is None  # type: ignore[union-attr]


async def test_the_task_page_and_the_tenants_page_show_their_objectives(
    api: httpx.AsyncClient, agent: AgentSpec, sign_in: SignIn
) -> None:
    tenant = await _tenant(api, ttft_s=1.5)
    submitted = await api.post("/v1/tasks", json=task_body(agent, tenant=tenant, objectives={"tpot_s": 0.04}))
    admin = await sign_in()

    page = (await admin.get(f"/tasks/{submitted.json()['task_id']}")).text
    assert (
        "latency objectives (interactive): <b>first token ≤ 1.5 s, ≤ 40 ms a token after it, for 99% of calls" in page
    )
    tenants = (await admin.get("/tenants")).text
    assert '<td data-col="objectives">first token ≤ 1.5 s</td>' in tenants
