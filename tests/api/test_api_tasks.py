"""Submitting, reading and steering tasks through the HTTP API."""

from __future__ import annotations

import re

import httpx
import pytest
from api_helpers import error_of, put_task, started_run, task_body, unique
from temporalio.client import Client as TemporalClient
from temporalio.client import WorkflowExecutionStatus

from orchestrator.api import TemporalGateway
from orchestrator.config import BerthConfig
from orchestrator.server import create_app
from orchestrator.store import Store
from sdk import AgentSpec, TaskStatus
from sdk.wire.identity import TenantSpec
from sdk.wire.limits import MAX_INPUT_CHARS, MAX_TOKEN_BUDGET


async def test_submit_records_the_task_and_starts_its_workflow(
    api: httpx.AsyncClient, store: Store, agent: AgentSpec, temporal_client: TemporalClient
) -> None:
    chosen = unique("t")
    task_id = f"default:{chosen}"  # a chosen id is its tenant's
    response = await api.post("/v1/tasks", json=task_body(agent, task_id=chosen, budget={"tokens": 4000, "usd": 2.5}))

    assert response.status_code == 201, response.text
    state = response.json()
    assert state["task_id"] == task_id
    assert state["status"] == "queued"
    assert state["agent_version"] == agent.version
    assert state["max_steps"] == 7
    assert state["spend"]["token_limit"] == 4000 and state["spend"]["usd_limit"] == 2.5

    record = store.tasks.get(task_id)
    assert record is not None and record.state.status == TaskStatus.queued
    assert '"Summarise the report."' in (record.spec_json or "")

    description = await temporal_client.get_workflow_handle(task_id).describe()
    assert description.status == WorkflowExecutionStatus.RUNNING
    run = await started_run(temporal_client, task_id)
    assert run.task_id == task_id and run.spec.task_id == task_id
    assert run.agent.version == agent.version
    assert run.budget_grace_s == BerthConfig().budget_grace_s
    assert run.fork_of is None


async def test_submit_overrides_model_and_steps_and_generates_an_id(
    api: httpx.AsyncClient, agent: AgentSpec, temporal_client: TemporalClient
) -> None:
    response = await api.post("/v1/tasks", json=task_body(agent, model="qwen2.5-7b", max_steps=3, budget_grace_s=60))

    assert response.status_code == 201, response.text
    state = response.json()
    assert re.fullmatch(r"t-[0-9a-f]{12}", state["task_id"])
    assert state["model"] == "qwen2.5-7b" and state["max_steps"] == 3
    run = await started_run(temporal_client, state["task_id"])
    assert run.agent.model == "qwen2.5-7b" and run.agent.max_steps == 3
    assert run.budget_grace_s == 60


async def test_resubmitting_the_same_spec_is_idempotent(
    api: httpx.AsyncClient, store: Store, agent: AgentSpec, temporal_client: TemporalClient
) -> None:
    body = task_body(agent, task_id=f"default:{unique('t')}")  # chosen with its tenant in front: kept as given
    first = await api.post("/v1/tasks", json=body)
    run_id = (await temporal_client.get_workflow_handle(body["task_id"]).describe()).run_id

    again = await api.post("/v1/tasks", json=body)

    assert first.status_code == 201 and again.status_code == 200, again.text
    assert again.json()["task_id"] == body["task_id"]
    assert (await temporal_client.get_workflow_handle(body["task_id"]).describe()).run_id == run_id
    assert len(store.tasks.list(agent=agent.name)) == 1


async def test_reusing_an_id_with_another_spec_is_a_conflict(
    api: httpx.AsyncClient, store: Store, agent: AgentSpec
) -> None:
    body = task_body(agent, task_id=f"default:{unique('t')}")
    assert (await api.post("/v1/tasks", json=body)).status_code == 201

    response = await api.post("/v1/tasks", json={**body, "input": "Something else entirely."})

    assert response.status_code == 409
    error = error_of(response)
    assert error["code"] == "conflict" and error["field"] == "task_id"
    assert "Summarise the report." in (store.tasks.get(body["task_id"]).spec_json or "")


BAD_SUBMISSIONS = [
    pytest.param({"budget": {"tokens": 0}}, "budget.tokens", id="zero-budget"),
    pytest.param({"budget": {"tokens": -5}}, "budget.tokens", id="negative-budget"),
    pytest.param({"budget": {"tokens": MAX_TOKEN_BUDGET + 1}}, "budget.tokens", id="absurd-budget"),
    pytest.param({"budget": {"tokens": 100, "usd": 0}}, "budget.usd", id="zero-usd"),
    pytest.param({"budget": {"tokens": "lots"}}, "budget.tokens", id="budget-not-a-number"),
    pytest.param({"budget": None}, "budget", id="no-budget"),
    pytest.param({"input": ""}, "input", id="empty-input"),
    pytest.param({"input": "   \n"}, "input", id="blank-input"),
    pytest.param({"input": "x" * (MAX_INPUT_CHARS + 1)}, "input", id="oversized-input"),
    pytest.param({"colour": "blue"}, "colour", id="unknown-field"),
    pytest.param({"budget": {"tokens": 100, "per": "day"}}, "budget.per", id="unknown-budget-field"),
    pytest.param({"task_id": "has spaces"}, "task_id", id="bad-task-id"),
    pytest.param({"priority": 10}, "priority", id="priority-too-high"),
    pytest.param({"max_steps": 0}, "max_steps", id="zero-steps"),
    pytest.param({"agent": "no-such-agent"}, "agent", id="unregistered-agent"),
    pytest.param({"agent": "Bad Name"}, "agent", id="bad-agent-name"),
    pytest.param({"model": "gpt-17-ultra"}, "model", id="unknown-model"),
]


@pytest.mark.parametrize(("change", "field"), BAD_SUBMISSIONS)
async def test_bad_submissions_are_refused_naming_the_field(
    api: httpx.AsyncClient, store: Store, agent: AgentSpec, change: dict, field: str
) -> None:
    body = {k: v for k, v in {**task_body(agent), **change}.items() if v is not None}

    response = await api.post("/v1/tasks", json=body)

    assert response.status_code == 422, response.text
    error = error_of(response)
    assert error["code"] == "invalid"
    assert error["field"] == field
    assert error["message"]
    assert store.tasks.list() == []


async def test_an_agent_whose_own_model_is_unknown_is_refused_at_submit(
    api: httpx.AsyncClient, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Registered while its provider key was set; the key is gone now.
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    hosted = store.agents.register(AgentSpec(name=unique("hosted"), model="openai/gpt-4o"))

    response = await api.post("/v1/tasks", json=task_body(hosted))

    assert response.status_code == 422
    error = error_of(response)
    assert error["field"] == "model" and "OPENAI_API_KEY" in error["message"]
    assert store.tasks.list() == []


@pytest.mark.parametrize(
    "content",
    [b"{not json", b"[1, 2]", b"", b"\xa4f<W"],
    ids=["malformed-json", "not-an-object", "empty-body", "not-utf-8"],
)
async def test_unreadable_bodies_get_the_one_error_shape_naming_the_body(
    api: httpx.AsyncClient, store: Store, content: bytes
) -> None:
    response = await api.post("/v1/tasks", content=content, headers={"content-type": "application/json"})

    assert response.status_code == 422
    assert error_of(response)["field"] == "body"  # a refusal names what it refuses, even the whole body
    assert store.tasks.list() == []


async def test_an_oversized_body_is_refused_before_it_is_parsed(api: httpx.AsyncClient, store: Store) -> None:
    response = await api.post(
        "/v1/tasks", content=b"x" * (5 * 1024 * 1024), headers={"content-type": "application/json"}
    )

    assert response.status_code == 413
    assert error_of(response)["code"] == "too_large"


async def test_nothing_is_left_behind_when_the_workflow_cannot_start(
    config: BerthConfig, store: Store, agent: AgentSpec, closed_port: int, admin_key: str
) -> None:
    app = create_app(config, store, TemporalGateway(f"127.0.0.1:{closed_port}"))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app), base_url="http://berth", headers={"authorization": f"Bearer {admin_key}"}
    ) as api:
        response = await api.post("/v1/tasks", json=task_body(agent, task_id=unique("t")))

    assert response.status_code == 503
    assert error_of(response)["code"] == "unavailable"
    assert store.tasks.list() == []


async def test_unknown_tasks_are_404_everywhere(api: httpx.AsyncClient) -> None:
    missing = unique("nope")
    for method, path, body in [
        ("GET", f"/v1/tasks/{missing}", None),
        ("POST", f"/v1/tasks/{missing}/cancel", None),
        ("POST", f"/v1/tasks/{missing}/raise-budget", {"tokens": 10}),
        ("POST", f"/v1/tasks/{missing}/answer", {"text": "yes"}),
        ("GET", f"/v1/tasks/{missing}/checkpoints", None),
        ("GET", f"/v1/tasks/{missing}/checkpoints/0", None),
        ("POST", f"/v1/tasks/{missing}/fork", {"checkpoint_seq": 0}),
        ("GET", f"/v1/tasks/{missing}/ledger", None),
        ("GET", f"/v1/tasks/{missing}/events", None),
    ]:
        response = await api.request(method, path, json=body)
        assert response.status_code == 404, (path, response.text)
        assert error_of(response)["code"] == "not_found"


async def test_get_returns_the_stored_state_of_a_queued_or_final_task(
    api: httpx.AsyncClient, store: Store, agent: AgentSpec
) -> None:
    queued = (await api.post("/v1/tasks", json=task_body(agent))).json()
    done = put_task(store, agent, TaskStatus.completed, result="42", step=3)

    assert (await api.get(f"/v1/tasks/{queued['task_id']}")).json()["status"] == "queued"
    body = (await api.get(f"/v1/tasks/{done.task_id}")).json()
    assert body["status"] == "completed" and body["result"] == "42" and body["step"] == 3


async def test_a_running_task_falls_back_to_its_stored_state_when_the_workflow_cannot_answer(
    api: httpx.AsyncClient, store: Store, agent: AgentSpec
) -> None:
    # The row says running but no workflow exists for it: the query fails, the row answers.
    running = put_task(store, agent, TaskStatus.running, step=2)

    body = (await api.get(f"/v1/tasks/{running.task_id}")).json()

    assert body["status"] == "running" and body["step"] == 2


async def test_list_filters_and_bounds(api: httpx.AsyncClient, store: Store, agent: AgentSpec) -> None:
    store.tenants.create(TenantSpec(name="acme"))
    mine = (await api.post("/v1/tasks", json=task_body(agent, tenant="acme"))).json()
    put_task(store, agent, TaskStatus.completed)

    by_tenant = (await api.get("/v1/tasks", params={"tenant": "acme"})).json()
    assert [s["task_id"] for s in by_tenant] == [mine["task_id"]]
    assert len((await api.get("/v1/tasks", params={"agent": agent.name})).json()) == 2
    assert [s["status"] for s in (await api.get("/v1/tasks", params={"status": "completed"})).json()] == ["completed"]
    assert len((await api.get("/v1/tasks", params={"limit": 1})).json()) == 1

    for params, field in [
        ({"status": "sleeping"}, "status"),
        ({"limit": 501}, "limit"),
        ({"offset": -1}, "offset"),
        ({"offset": 2**63}, "offset"),
    ]:
        response = await api.get("/v1/tasks", params=params)
        assert response.status_code == 422 and error_of(response)["field"] == field


async def test_raise_budget_needs_something_to_add(api: httpx.AsyncClient, store: Store, agent: AgentSpec) -> None:
    running = put_task(store, agent)
    for body, field in [
        ({}, "tokens"),
        ({"tokens": 0, "usd": 0}, "tokens"),
        ({"tokens": -1}, "tokens"),
        ({"usd": -2}, "usd"),
        ({"tokens": 10, "extra": 1}, "extra"),
    ]:
        response = await api.post(f"/v1/tasks/{running.task_id}/raise-budget", json=body)
        assert response.status_code == 422, body
        assert error_of(response)["field"] == field


async def test_acting_on_a_finished_task_is_a_conflict_with_the_reason(
    api: httpx.AsyncClient, store: Store, agent: AgentSpec
) -> None:
    ended = put_task(store, agent, TaskStatus.out_of_budget, error="budget exhausted at step 4")
    for path, body in [("cancel", None), ("raise-budget", {"tokens": 100}), ("answer", {"text": "yes"})]:
        response = await api.post(f"/v1/tasks/{ended.task_id}/{path}", json=body)
        assert response.status_code == 409, path
        error = error_of(response)
        assert error["code"] == "conflict"
        assert "out_of_budget" in error["message"] and "budget exhausted at step 4" in error["message"]


async def test_cancel_signals_the_workflow(
    api: httpx.AsyncClient, agent: AgentSpec, temporal_client: TemporalClient
) -> None:
    task_id = (await api.post("/v1/tasks", json=task_body(agent))).json()["task_id"]

    response = await api.post(f"/v1/tasks/{task_id}/cancel", json={"reason": "changed my mind"})

    assert response.status_code == 202 and response.json()["task_id"] == task_id
    history = await temporal_client.get_workflow_handle(task_id).fetch_history()
    signals = [
        e.workflow_execution_signaled_event_attributes
        for e in history.events
        if e.HasField("workflow_execution_signaled_event_attributes")
    ]
    assert [s.signal_name for s in signals] == ["cancel"]
    assert b"changed my mind" in signals[0].input.payloads[0].data


async def test_cancel_without_a_body_uses_the_default_reason(api: httpx.AsyncClient, agent: AgentSpec) -> None:
    task_id = (await api.post("/v1/tasks", json=task_body(agent))).json()["task_id"]
    assert (await api.post(f"/v1/tasks/{task_id}/cancel")).status_code == 202


async def test_answer_is_refused_unless_the_task_awaits_input(
    api: httpx.AsyncClient, store: Store, agent: AgentSpec
) -> None:
    queued = (await api.post("/v1/tasks", json=task_body(agent))).json()

    response = await api.post(f"/v1/tasks/{queued['task_id']}/answer", json={"text": "blue"})
    assert response.status_code == 409 and "not awaiting input" in error_of(response)["message"]

    empty = await api.post(f"/v1/tasks/{queued['task_id']}/answer", json={"text": ""})
    assert empty.status_code == 422 and error_of(empty)["field"] == "text"


async def test_unknown_routes_and_methods_use_the_error_shape(api: httpx.AsyncClient) -> None:
    missing = await api.get("/v1/nothing-here")
    assert missing.status_code == 404 and error_of(missing)["code"] == "not_found"
    wrong = await api.delete("/v1/tasks")
    assert wrong.status_code == 405 and error_of(wrong)["code"] == "method_not_allowed"


async def test_openapi_documents_the_routes(api: httpx.AsyncClient) -> None:
    schema = (await api.get("/openapi.json")).json()
    assert {"/v1/tasks", "/v1/tasks/{task_id}/fork", "/v1/agents", "/readyz"} <= set(schema["paths"])
    refused = schema["paths"]["/v1/tasks"]["post"]["responses"]["422"]
    assert refused["content"]["application/json"]["schema"]["$ref"].endswith("/ErrorBody")


async def test_a_tasks_interruptions_are_listed_with_where_it_resumed(api, store, agent) -> None:
    state = put_task(store, agent)
    store.events.append(state.task_id, "llm_call", {"step": 1})
    record = {"step": 2, "node_id": "gpu-b", "kind": "lost", "tokens_lost": 37, "resumed_on": "gpu-a", "resume_s": 5.4}
    store.events.append(state.task_id, "interruption", record)
    listed = (await api.get(f"/v1/tasks/{state.task_id}/interruptions")).json()
    assert [(e["kind"], e["data"]) for e in listed] == [("interruption", record)]
    assert (await api.get("/v1/tasks/no-such-task/interruptions")).status_code == 404
