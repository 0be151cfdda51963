"""Bounded inputs, played as a careless or hostile client: numbers beyond 64 bits, booleans sent as numbers,
a megabyte where a sentence goes, thousands of tools. Each is refused by name (the field, the reason) with
a 4xx, in the UI as a page and on /v1 in the API's error shape, and nothing reaches the store or Temporal.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import httpx
import pytest
from mcp.server.mcpserver.exceptions import ToolError

from orchestrator.mcp_server import build_server
from orchestrator.store import Store
from sdk import AgentSpec, Client, Spend, TaskSpec, TaskState, TaskStatus, ToolSpec
from sdk._spec import MAX_AGENT_TOOLS
from sdk.wire.limits import MAX_MCP_SERVERS, MAX_REASON_CHARS
from tests.security.parties import JOIN_TOKEN, error_of

BEYOND_64_BITS = 2**64 + 1  # Python's C code (sqlite3, struct) raises OverflowError past 2**63 - 1


def _csrf_of(page: httpx.Response) -> str:
    found = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
    assert found, page.text[:500]
    return found.group(1)


@pytest.fixture
async def browser(app, admin_key: str) -> AsyncIterator[httpx.AsyncClient]:
    """A browser signed in to the admin UI with the admin key."""
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://berth") as client:
        form = await client.get("/login")
        signed = await client.post("/login", data={"api_key": admin_key, "csrf_token": _csrf_of(form)})
        assert signed.status_code == 303, signed.text[:500]
        yield client


@pytest.fixture
def agent(store: Store) -> AgentSpec:
    return store.agents.register(
        AgentSpec(name=f"bounded-{uuid.uuid4().hex[:8]}", model="llama-3.1-8b", tools=[ToolSpec(name="lookup")])
    )


@pytest.fixture
def task(store: Store, agent: AgentSpec) -> TaskState:
    """A running task's row, as the workflow leaves it (no workflow: the refusals come first)."""
    task_id = f"t-{uuid.uuid4().hex[:8]}"
    spec = TaskSpec(task_id=task_id, agent=agent.name, input="Summarise.", budget={"tokens": 5000})
    state = TaskState(
        task_id=task_id,
        agent=agent.name,
        agent_version=agent.version,
        model=agent.model,
        tenant="default",
        status=TaskStatus.running,
        max_steps=agent.max_steps,
        spend=Spend(token_limit=5000),
        updated_at=datetime.now(UTC),
    )
    assert store.tasks.create(task_id, spec.model_dump_json(), state)
    return state


# -- integers beyond 64 bits ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "field"),
    [
        ("/tasks/{task}/checkpoints/{huge}", "seq"),
        ("/tasks/{task}/live?after={huge}", "after"),
        ("/tasks?page={huge}", "page"),
        ("/audit?page={huge}", "page"),
    ],
)
async def test_the_ui_refuses_an_integer_beyond_64_bits_with_a_page_not_a_crash(
    browser: httpx.AsyncClient, task: TaskState, path: str, field: str
) -> None:
    refused = await browser.get(path.format(task=task.task_id, huge=BEYOND_64_BITS))
    assert refused.status_code == 422, refused.text[:500]
    assert refused.headers["content-type"].startswith("text/html")
    assert "Traceback" not in refused.text and "OverflowError" not in refused.text
    assert f"{field}:" in refused.text


@pytest.mark.parametrize(
    ("action", "form"),
    [
        ("fork", {"checkpoint_seq": str(BEYOND_64_BITS)}),
        ("raise-budget", {"tokens": str(BEYOND_64_BITS)}),
    ],
)
async def test_the_ui_refuses_a_form_integer_beyond_64_bits_by_name(
    browser: httpx.AsyncClient, task: TaskState, action: str, form: dict[str, str]
) -> None:
    page = await browser.get(f"/tasks/{task.task_id}")
    assert page.status_code == 200, page.text[:500]
    refused = await browser.post(f"/tasks/{task.task_id}/{action}", data={**form, "csrf_token": _csrf_of(page)})
    assert refused.status_code == 422, refused.text[:500]
    assert f"{next(iter(form))}:" in refused.text


async def test_the_api_refuses_an_integer_beyond_64_bits_by_name(api: httpx.AsyncClient, task: TaskState) -> None:
    for path, field in (
        (f"/v1/tasks/{task.task_id}/checkpoints/{BEYOND_64_BITS}", "seq"),
        (f"/v1/tasks/{task.task_id}/events?after={BEYOND_64_BITS}", "after"),
        (f"/v1/tasks?offset={BEYOND_64_BITS}", "offset"),
    ):
        refused = await api.get(path)
        assert refused.status_code == 422 and error_of(refused)["field"] == field, (path, refused.text)


# -- booleans are not numbers -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"budget": {"tokens": True}}, "budget.tokens"),
        ({"budget": {"tokens": 5000, "usd": True}}, "budget.usd"),
        ({"priority": True}, "priority"),
        ({"max_steps": True}, "max_steps"),
        ({"max_interruptions": False}, "max_interruptions"),
    ],
)
async def test_a_boolean_is_never_taken_for_a_number_in_a_submission(
    api: httpx.AsyncClient, store: Store, agent: AgentSpec, body: dict, field: str
) -> None:
    submission = {"agent": agent.name, "input": "Summarise.", "budget": {"tokens": 5000}, **body}
    refused = await api.post("/v1/tasks", json=submission)
    assert refused.status_code == 422, refused.text
    assert error_of(refused)["field"] == field and "boolean" in error_of(refused)["message"]
    assert store.tasks.list(agent=agent.name) == []


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/tasks/{task}/raise-budget", {"tokens": True}, "tokens"),
        ("/v1/tasks/{task}/fork", {"checkpoint_seq": True}, "checkpoint_seq"),
        ("/v1/agents", {"name": "flag-agent", "model": "llama-3.1-8b", "max_steps": True}, "max_steps"),
        (
            "/v1/agents",
            {"name": "flag-agent", "model": "llama-3.1-8b", "max_tokens_per_step": True},
            "max_tokens_per_step",
        ),
        ("/v1/tenants", {"name": "flagged", "gpu_quota": True}, "gpu_quota"),
    ],
)
async def test_a_boolean_is_never_taken_for_a_number_anywhere_a_client_sends_one(
    api: httpx.AsyncClient, task: TaskState, path: str, body: dict, field: str
) -> None:
    refused = await api.post(path.format(task=task.task_id), json=body)
    assert refused.status_code == 422 and error_of(refused)["field"] == field, refused.text


async def test_a_scaling_policy_of_booleans_is_refused(api: httpx.AsyncClient) -> None:
    refused = await api.put("/v1/models/llama-3.2-1b/policy", json={"min_replicas": False, "max_replicas": True})
    assert refused.status_code == 422 and error_of(refused)["field"] in {"min_replicas", "max_replicas"}


# -- strings and lists with limits ------------------------------------------------------------


async def test_a_cancel_reason_is_a_sentence_not_a_megabyte(api: httpx.AsyncClient, task: TaskState) -> None:
    refused = await api.post(f"/v1/tasks/{task.task_id}/cancel", json={"reason": "x" * MAX_REASON_CHARS + "x"})
    assert refused.status_code == 422 and error_of(refused)["field"] == "reason", refused.text
    refused = await api.post(f"/v1/tasks/{task.task_id}/cancel", json={"reason": "x" * 1_000_000})
    assert refused.status_code == 422 and "x" * 100 not in refused.text


async def test_an_agent_offers_its_model_no_more_tools_than_the_model_takes(api: httpx.AsyncClient) -> None:
    many = [{"name": f"tool_{i}"} for i in range(5000)]
    refused = await api.post("/v1/agents", json={"name": "toolbox", "model": "llama-3.1-8b", "tools": many})
    assert refused.status_code == 422 and error_of(refused)["field"] == "tools", refused.text
    assert str(MAX_AGENT_TOOLS) in error_of(refused)["message"]
    at_most = {"name": "toolbox", "model": "llama-3.1-8b", "tools": many[:MAX_AGENT_TOOLS]}
    assert (await api.post("/v1/agents", json=at_most)).status_code == 201
    servers = [{"name": f"server{i}", "url": f"http://127.0.0.1:{9000 + i}/mcp"} for i in range(MAX_MCP_SERVERS + 1)]
    refused = await api.post("/v1/agents", json={"name": "hub", "model": "llama-3.1-8b", "mcp_servers": servers})
    assert refused.status_code == 422 and error_of(refused)["field"] == "mcp_servers", refused.text


# -- every refusal names its field ------------------------------------------------------------


async def test_a_rule_across_fields_names_the_field_to_fix(api: httpx.AsyncClient) -> None:
    policy = await api.put("/v1/models/llama-3.2-1b/policy", json={"min_replicas": 5, "max_replicas": 2})
    assert policy.status_code == 422 and error_of(policy)["field"] == "min_replicas", policy.text
    weightless = await api.put("/v1/models/weightless", json={"name": "weightless", "provider": "self-hosted"})
    assert weightless.status_code == 422 and error_of(weightless)["field"] == "weights_gib", weightless.text
    keyless = await api.put("/v1/models/keyless", json={"name": "keyless", "provider": "hosted"})
    assert keyless.status_code == 422 and error_of(keyless)["field"] == "api_key_env", keyless.text


async def test_a_node_listing_one_gpu_index_twice_is_told_which_listing(app) -> None:
    gpu = {"uuid": "GPU-a", "type_name": "H100-80GB", "memory_total_mib": 81559}
    registration = {
        "node_id": "twice",
        "datacenter": "dc1",
        "zone": "z1",
        "join_token": JOIN_TOKEN,
        "gpus": [{**gpu, "index": 0}, {**gpu, "index": 1, "uuid": "GPU-b"}, {**gpu, "index": 0, "uuid": "GPU-c"}],
    }
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://berth") as node:
        refused = await node.post("/v1/nodes/register", json=registration)
    assert refused.status_code == 422 and error_of(refused)["field"] == "gpus.2.index", refused.text


async def test_mcp_refuses_what_the_api_refuses_before_calling_it(
    app, admin_key: str, agent: AgentSpec, task: TaskState
) -> None:
    server = build_server(lambda: Client("http://berth", admin_key, transport=httpx.ASGITransport(app)))
    for tool, arguments, named in (
        ("submit_task", {"agent": agent.name, "input": "Summarise.", "budget_tokens": True}, "budget_tokens"),
        (
            "submit_task",
            {"agent": agent.name, "input": "Summarise.", "budget_tokens": 900, "priority": True},
            "priority",
        ),
        ("cancel_task", {"task_id": task.task_id, "reason": "x" * (MAX_REASON_CHARS + 1)}, "reason"),
        ("raise_budget", {"task_id": task.task_id, "tokens": True}, "tokens"),
    ):
        with pytest.raises(ToolError, match=named):
            await server.call_tool(tool, arguments)


@pytest.mark.parametrize(
    ("method", "path", "body", "field"),
    [
        # A timer of 1e300 seconds is an OverflowError in the workflow's timedelta, not a long wait.
        (
            "POST",
            "/v1/agents",
            {"name": "patient", "model": "llama-3.1-8b", "ask_human_timeout_s": 1e300},
            "ask_human_timeout_s",
        ),
        ("PUT", "/v1/models/llama-3.2-1b/policy", {"target": 1e300}, "target"),
        (
            "PUT",
            "/v1/models/priced",
            {"name": "priced", "weights_gib": 1, "usd_per_1m_prompt": 1e300},
            "usd_per_1m_prompt",
        ),
    ],
)
async def test_a_number_past_any_sensible_value_is_refused_by_name(
    api: httpx.AsyncClient, method: str, path: str, body: dict, field: str
) -> None:
    refused = await api.request(method, path, json=body)
    assert refused.status_code == 422 and error_of(refused)["field"] == field, refused.text
