"""The budget tree is one account: a sub-agent's budget grows only out of its parent's remainder.

Before, an agent key raised a sub-agent's budget directly (`POST /v1/tasks/<parent>.x.1/raise-budget`):
the tree spent 2.06x its root's limit, the parent still reported success, 600 tokens stayed reserved
for ever, and the worker's BudgetViolation died unseen in a background task. Real workflows here,
on the simulated engine: the parent asks a human (so it stays running), its sub-agent too.
"""

from __future__ import annotations

import uuid

import httpx
import pytest
from temporalio.client import WorkflowUpdateFailedError

from sdk import Agent, Spend, TaskState, TaskStatus
from sdk.wire.contracts import RAISE_BUDGET_UPDATE, RaiseBudget
from sdk.wire.identity import Role, TenantSpec
from tests.security.parties import Live, error_of

ROOT_LIMIT, CHILD_TOKENS = 10_000, 3_000


def agents(live: Live) -> tuple[str, str]:
    tag = uuid.uuid4().hex[:6]
    lead = Agent(f"lead-{tag}", "llama-3.2-1b", "Lead the work.", allow_ask_human=True, max_tokens_per_step=256)
    helper = Agent(f"helper-{tag}", "llama-3.2-1b", "Help.", allow_ask_human=True, max_tokens_per_step=256)
    for agent in (lead, helper):
        live.register(agent, tenant="acme")
    return lead.name, helper.name


async def asking_root(live: Live, http: httpx.AsyncClient, agent: str) -> str:
    """A root task of ROOT_LIMIT tokens, waiting for its human (so it runs as long as the test needs)."""
    answer = await http.post(
        "/v1/tasks", json={"agent": agent, "input": "ask: which GPU?", "budget": {"tokens": ROOT_LIMIT}}
    )
    await live.wait_for(http, answer.json()["task_id"], TaskStatus.awaiting_input)
    return answer.json()["task_id"]


@pytest.fixture
def acme(live: Live) -> str:
    live.store.tenants.create(TenantSpec(name="acme"))
    return live.key(Role.agent, "acme")


async def _spawned(live: Live, http: httpx.AsyncClient) -> tuple[str, str]:
    """A waiting root task and a sub-agent of CHILD_TOKENS spawned under it through the API: their ids."""
    lead, helper = agents(live)
    parent = await asking_root(live, http, lead)
    spawned = await http.post(
        f"/v1/tasks/{parent}/spawn", json={"agent": helper, "input": "ask: how deep?", "tokens": CHILD_TOKENS}
    )
    assert spawned.status_code == 201, spawned.text
    return parent, spawned.json()["task_id"]


async def test_a_spawned_sub_agent_is_there_the_moment_its_spawn_answers(live: Live, acme: str) -> None:
    """The spawn's answer names a task the caller can act on at once (read it, preempt it), before the child's
    workflow has saved anything of its own."""
    async with live.as_key(acme) as http:
        parent, child = await _spawned(live, http)
        read = await http.get(f"/v1/tasks/{child}")
        assert read.status_code == 200, read.text
        assert TaskState.model_validate(read.json()).parent_task_id == parent
        preempted = await http.post(f"/v1/tasks/{child}/simulate-preemption")
        assert preempted.status_code in (202, 409), preempted.text


async def test_a_sub_agents_budget_grows_only_out_of_its_parents_remainder(live: Live, acme: str) -> None:
    async with live.as_key(acme) as http:
        parent, child = await _spawned(live, http)
        await live.wait_for(http, child, TaskStatus.awaiting_input)

        raised = await http.post(f"/v1/tasks/{child}/raise-budget", json={"tokens": 2000})
        assert raised.status_code == 200, raised.text
        assert Spend.model_validate(raised.json()).token_limit == CHILD_TOKENS + 2000
        state = TaskState.model_validate((await http.get(f"/v1/tasks/{parent}")).json())
        assert state.spend.reserved_for_children == CHILD_TOKENS + 2000  # carved out of the parent's remainder

        # Beyond what the parent has left: refused with the numbers, nothing carved.
        too_much = await http.post(f"/v1/tasks/{child}/raise-budget", json={"tokens": 50_000})
        assert too_much.status_code == 409 and error_of(too_much)["field"] == "tokens", too_much.text
        assert "remain of task" in error_of(too_much)["message"]
        # The child's own workflow refuses a raise sent to it directly, whoever sends it.
        with pytest.raises(WorkflowUpdateFailedError):
            await live.temporal.get_workflow_handle(child).execute_update(
                RAISE_BUDGET_UPDATE, RaiseBudget(tokens=50_000), result_type=Spend
            )

        assert (await http.post(f"/v1/tasks/{child}/answer", json={"text": "very"})).status_code == 200
        done_child = await live.wait_for(http, child, *FINAL)
        assert done_child.spend.token_limit == CHILD_TOKENS + 2000
        assert (await http.post(f"/v1/tasks/{parent}/answer", json={"text": "an H100"})).status_code == 200
        done = await live.wait_for(http, parent, *FINAL)
    assert done.status == TaskStatus.completed, done.error
    assert done.spend.reserved_for_children == 0  # nothing stays reserved once the tree is done
    tree = live.store.ledger.totals(parent).tokens + live.store.ledger.totals(child).tokens
    assert tree == done.spend.tokens_used <= ROOT_LIMIT


async def test_a_task_token_cannot_raise_its_own_sub_agent(live: Live, acme: str) -> None:
    lead, helper = agents(live)
    async with live.as_key(acme) as http:
        parent = await asking_root(live, http, lead)
        token = (await http.post(f"/v1/tasks/{parent}/token")).json()["key"]
    async with live.as_key(token) as tool:
        child = await tool.post(
            "/v1/tasks", json={"agent": helper, "input": "ask: how deep?", "budget": {"tokens": CHILD_TOKENS}}
        )
        assert child.status_code == 201, child.text
        refused = await tool.post(f"/v1/tasks/{child.json()['task_id']}/raise-budget", json={"tokens": 10})
        assert refused.status_code == 403 and error_of(refused)["field"] == "authorization"


FINAL = (TaskStatus.completed, TaskStatus.failed, TaskStatus.cancelled, TaskStatus.out_of_budget, TaskStatus.max_steps)
