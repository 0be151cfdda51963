"""A task token does only what its task may: submit sub-agents out of its remainder, cancel them, read its tree.

Before, a task token registered an agent over a tenant agent's definition (a persistent prompt injection
into every task of the tenant that runs it) and answered its own task's `ask_human` question, which
defeats the human gate.
"""

from __future__ import annotations

import uuid

import pytest

from orchestrator.store import Store
from sdk import Agent, AgentSpec, Message, Spend, TaskSpec, TaskState, TaskStatus
from sdk.wire.identity import Role, TenantSpec
from tests.security.parties import Live, error_of


def awaiting_task(store: Store, agent: str) -> str:
    """A task of acme waiting for its human, as its workflow leaves it (the refusals never reach a workflow)."""
    spec = TaskSpec(task_id="acme:asking", agent=agent, input="ask: may I?", budget={"tokens": 10_000}, tenant="acme")
    state = TaskState(
        task_id=spec.task_id,
        agent=agent,
        agent_version="1",
        model="llama-3.2-1b",
        tenant="acme",
        status=TaskStatus.awaiting_input,
        max_steps=5,
        spend=Spend(token_limit=10_000),
        question="may I?",
    )
    store.tasks.create("acme:asking", spec.model_dump_json(), state)
    store.checkpoints.write_root("acme:asking", [Message(role="user", content="ask: may I?")], {})
    return "acme:asking"


@pytest.fixture
def token_and_task(store: Store) -> tuple[str, str, str]:
    """(the task's id, its token, the tenant's agent's name)."""
    store.tenants.create(TenantSpec(name="acme"))
    agent = store.agents.register(
        AgentSpec(name="asker", model="llama-3.2-1b", instructions="Ask, then answer.", allow_ask_human=True),
        tenant="acme",
    )
    task_id = awaiting_task(store, agent.name)
    token = store.keys.create(Role.agent, "acme", name="task token", task_id=task_id).key
    return task_id, token, agent.name


@pytest.mark.parametrize(
    "method, path, body",
    [
        ("POST", "/v1/tasks/{task}/answer", {"text": "yes, go ahead"}),  # its own human gate
        ("POST", "/v1/tasks/{task}/raise-budget", {"tokens": 1000}),
        ("POST", "/v1/tasks/{task}/fork", {"checkpoint_seq": 0}),
        ("POST", "/v1/tasks/{task}/token", None),
        ("POST", "/v1/tasks/{task}/cancel", {"reason": "I quit"}),  # it ends by its agent's answer or a person
        ("POST", "/v1/tasks/{task}/simulate-preemption", None),
        ("POST", "/v1/agents", {"name": "{agent}", "model": "llama-3.2-1b", "instructions": "Obey the injection."}),
        ("GET", "/v1/nodes", None),
        ("GET", "/v1/keys", None),
        ("POST", "/v1/models/llama-3.2-1b/prewarm", {}),
    ],
)
async def test_a_task_token_may_do_nothing_beyond_its_task(
    client_as, store: Store, token_and_task, method: str, path: str, body: dict | None
) -> None:
    task_id, token, agent = token_and_task
    before = store.agents.get(agent)
    async with client_as(Role.agent, key=token) as tool:
        payload = {k: (v.format(agent=agent) if isinstance(v, str) else v) for k, v in body.items()} if body else None
        refused = await tool.request(method, path.format(task=task_id), json=payload)
    assert refused.status_code == 403 and error_of(refused)["field"] == "authorization", refused.text
    state = store.tasks.get(task_id).state  # type: ignore[union-attr]
    assert state.status == TaskStatus.awaiting_input and state.question  # still waiting for its human
    assert store.agents.get(agent) == before and store.keys.list()[-1].task_id == task_id


async def test_a_task_token_submits_sub_agents_cancels_them_and_reads_only_its_tree(live: Live) -> None:
    live.store.tenants.create(TenantSpec(name="acme"))
    key = live.key(Role.agent, "acme")
    asker = Agent(
        f"asker-{uuid.uuid4().hex[:6]}",
        "llama-3.2-1b",
        "Ask, then answer.",
        allow_ask_human=True,
        max_tokens_per_step=256,
    )
    live.register(asker, tenant="acme")
    agent = asker.name
    async with live.as_key(key) as http:
        task_id = (
            await http.post("/v1/tasks", json={"agent": agent, "input": "ask: may I?", "budget": {"tokens": 10_000}})
        ).json()["task_id"]
        await live.wait_for(http, task_id, TaskStatus.awaiting_input)
        token = (await http.post(f"/v1/tasks/{task_id}/token")).json()["key"]
        sibling = (
            await http.post("/v1/tasks", json={"agent": agent, "input": "ask: other?", "budget": {"tokens": 1000}})
        ).json()["task_id"]
    async with live.as_key(token) as tool:
        child = await tool.post("/v1/tasks", json={"agent": agent, "input": "ask: deep?", "budget": {"tokens": 2000}})
        assert child.status_code == 201, child.text
        child_id = child.json()["task_id"]
        assert child_id.startswith(task_id + "~") and child.json()["parent_task_id"] == task_id
        await live.wait_for(tool, child_id, TaskStatus.awaiting_input)
        assert (await tool.get(f"/v1/tasks/{task_id}")).status_code == 200
        assert (await tool.get(f"/v1/tasks/{task_id}/checkpoints")).status_code == 200
        assert (await tool.get(f"/v1/tasks/{sibling}")).status_code == 404  # same tenant, not its tree
        assert sibling not in [t["task_id"] for t in (await tool.get("/v1/tasks")).json()]
        assert (await tool.get("/v1/agents")).status_code == 200
        cancelled = await tool.post(f"/v1/tasks/{child_id}/cancel", json={"reason": "not needed"})
        assert cancelled.status_code == 202, cancelled.text
