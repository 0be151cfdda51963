"""Ids belong to tenants: no tenant can take, wedge or learn of another tenant's task through its id.

Before, tenant B submitted `task_id: "<A's task>.x.1"`, A's next spawn failed with 409 and A's task
stayed `running` for ever, even after answer and cancel; and a submit colliding with another
tenant's id answered 409 "already used", which told B that the task existed.
"""

from __future__ import annotations

import uuid

import pytest

from sdk import Agent, TaskStatus
from sdk.wire.identity import Role, TenantSpec
from tests.security.parties import Live, error_of
from tests.security.test_budget_tree import FINAL


@pytest.fixture
def keys(live: Live) -> dict[str, str]:
    for name in ("acme", "globex"):
        live.store.tenants.create(TenantSpec(name=name))
    return {name: live.key(Role.agent, name) for name in ("acme", "globex")}


def shared_agent(live: Live) -> str:
    agent = Agent(
        f"asker-{uuid.uuid4().hex[:6]}",
        "llama-3.2-1b",
        "Ask, then answer.",
        allow_ask_human=True,
        max_tokens_per_step=256,
    )
    live.register(agent)  # registered by no tenant: every tenant may use it
    return agent.name


async def test_the_same_chosen_id_in_two_tenants_is_two_tasks_and_resubmits_stay_idempotent(
    live: Live, keys: dict[str, str]
) -> None:
    agent = shared_agent(live)
    body = {"agent": agent, "input": "ask: ready?", "budget": {"tokens": 5000}, "task_id": "nightly-1"}
    async with live.as_key(keys["acme"]) as acme, live.as_key(keys["globex"]) as globex:
        first = await acme.post("/v1/tasks", json=body)
        assert first.status_code == 201 and first.json()["task_id"] == "acme:nightly-1"
        again = await acme.post("/v1/tasks", json=body)
        assert again.status_code == 200 and again.json()["task_id"] == "acme:nightly-1"
        same_full_id = await acme.post("/v1/tasks", json={**body, "task_id": "acme:nightly-1"})
        assert same_full_id.status_code == 200

        # B chooses the same id, or A's whole id: each is B's own new task, and nothing says A's exists.
        for chosen, becomes in (("nightly-1", "globex:nightly-1"), ("acme:nightly-1", "globex:acme:nightly-1")):
            theirs = await globex.post("/v1/tasks", json={**body, "task_id": chosen})
            assert theirs.status_code == 201 and theirs.json()["task_id"] == becomes, theirs.text
            assert theirs.json()["tenant"] == "globex"
        # Another spec under the tenant's own id is a conflict: its own task, so no one else's secret.
        changed = await acme.post("/v1/tasks", json={**body, "input": "ask: something else?"})
        assert changed.status_code == 409 and error_of(changed)["field"] == "task_id"
        # B's own id reads as B's: the id it chose that looks like A's names B's own task, never A's.
        own = await globex.get("/v1/tasks/acme:nightly-1")
        assert own.status_code == 200 and own.json()["task_id"] == "globex:acme:nightly-1"
        # A task of A's that B holds no id like answers B exactly as a missing one does.
        assert (await acme.post("/v1/tasks", json={**body, "task_id": "nightly-2"})).status_code == 201
        seen = await globex.get("/v1/tasks/acme:nightly-2")
        missing = await globex.get("/v1/tasks/acme:never-was")
        assert seen.status_code == missing.status_code == 404
        assert error_of(seen)["message"].replace("nightly-2", "X") == error_of(missing)["message"].replace(
            "never-was", "X"
        )


async def test_no_client_can_take_a_sub_agents_id_first_so_no_spawn_is_wedged(live: Live, keys: dict[str, str]) -> None:
    agent = shared_agent(live)
    async with live.as_key(keys["acme"]) as acme, live.as_key(keys["globex"]) as globex:
        parent = (
            await acme.post("/v1/tasks", json={"agent": agent, "input": "ask: ready?", "budget": {"tokens": 20_000}})
        ).json()["task_id"]
        await live.wait_for(acme, parent, TaskStatus.awaiting_input)
        # The old form of a sub-agent's id, and the new mark: the first is B's own task, the second no id at all.
        old_form = await globex.post(
            "/v1/tasks",
            json={"agent": agent, "input": "ask: x?", "budget": {"tokens": 100}, "task_id": f"{parent}.x.1"},
        )
        assert old_form.status_code == 201 and old_form.json()["task_id"] == f"globex:{parent}.x.1"
        marked = await globex.post(
            "/v1/tasks",
            json={"agent": agent, "input": "ask: x?", "budget": {"tokens": 100}, "task_id": f"{parent}~x.1"},
        )
        assert marked.status_code == 422 and error_of(marked)["field"] == "task_id"

        spawned = await acme.post(
            f"/v1/tasks/{parent}/spawn", json={"agent": agent, "input": "ask: deep?", "tokens": 2000}
        )
        assert spawned.status_code == 201, spawned.text
        child = spawned.json()["task_id"]
        assert child.startswith(parent + "~")
        await live.wait_for(acme, child, TaskStatus.awaiting_input)
        assert (await globex.get(f"/v1/tasks/{child}")).status_code == 404
        # The tree still ends: the child is answered, the parent cancelled, and nothing stays running.
        assert (await acme.post(f"/v1/tasks/{child}/answer", json={"text": "yes"})).status_code == 200
        assert (await acme.post(f"/v1/tasks/{parent}/cancel", json={"reason": "enough"})).status_code == 202
        done = await live.wait_for(acme, parent, *FINAL)
        assert done.status == TaskStatus.cancelled and done.spend.reserved_for_children == 0
