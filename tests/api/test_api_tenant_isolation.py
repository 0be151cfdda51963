"""Tenant isolation on every read route under /v1, each route on its own so a leak names it.

Two tenants own tasks (with checkpoints, events and a ledger), a private agent and a node
dedicated to them; each reads with an agent key confined to it. Every GET route of the app is
classified below, and a route that is not fails `test_every_read_route_is_classified`, so a new
route cannot escape: another tenant's task or agent answers exactly as a missing one (no
existence leak), lists hold only the caller's own (and shared) items, admin routes refuse,
and the fleet-wide routes, which serve every tenant, name no other tenant nor its tasks.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
from api_helpers import error_of, tenant_task

from orchestrator.store import Store
from sdk import AgentSpec, TaskStatus
from sdk.wire.fleet import GpuDescription, NodeSpec
from sdk.wire.identity import Role, TenantSpec
from sdk.wire.ledger import LedgerEntry

TENANTS = ("acme", "globex")
MODEL = "llama-3.1-8b"

# Every GET route under /v1, by how it must treat another tenant's data.
TASK = "task"  # another tenant's task answers 404, word for word as a missing one
# A part of a task that the caller's own task may not have either (one tool call's result of an own loop):
# another tenant's task answers 404, word for word as a missing one.
TASK_PART = "task part"
TASK_LIST = "task list"  # only the caller's tenant's tasks
AGENT = "agent"  # another tenant's private agent answers 404 as a missing one
AGENT_LIST = "agent list"  # the caller's own and the shared agents only
ADMIN = "admin"  # 403 for a tenant's agent key
FLEET = "fleet"  # every tenant's by design: must name no other tenant nor its tasks
READ_ROUTES = {
    "/v1/tasks": TASK_LIST,
    "/v1/tasks/{task_id}": TASK,
    "/v1/tasks/{task_id}/interruptions": TASK,
    "/v1/tasks/{task_id}/checkpoints": TASK,
    "/v1/tasks/{task_id}/checkpoints/{seq}": TASK,
    "/v1/tasks/{task_id}/ledger": TASK,
    "/v1/tasks/{task_id}/events": TASK,
    "/v1/tasks/{task_id}/writing": TASK,
    "/v1/tasks/{task_id}/tool-results/{call_id}": TASK_PART,
    "/v1/tasks/{task_id}/models": TASK,
    "/v1/tasks/{task_id}/approvals": TASK_PART,
    "/v1/tasks/{task_id}/models/{model}": TASK,
    "/v1/agents": AGENT_LIST,
    "/v1/agents/{name}": AGENT,
    "/v1/tenants": ADMIN,
    "/v1/tenants/{name}": ADMIN,
    "/v1/keys": ADMIN,
    "/v1/audit": ADMIN,
    "/v1/nodes": ADMIN,  # the fleet's nodes and replicas: for keys of no tenant only (issue 34)
    "/v1/nodes/{node_id}": ADMIN,
    "/v1/replicas": ADMIN,
    "/v1/node-pools/tokens": ADMIN,  # pool tokens, without their secrets: operators and admins of no tenant
    "/v1/models": FLEET,
    "/v1/models/{name}": FLEET,
    "/v1/models/{name}/policy": FLEET,
}


@dataclass(frozen=True)
class Tenancy:
    """What one tenant owns, and the agent key it reads with."""

    name: str
    key: str
    tasks: tuple[str, ...]  # finished first: its event stream ends, so it can be read whole
    agent: str
    node: str


def _task(store: Store, agent: AgentSpec, tenant: str, task_id: str, status: TaskStatus) -> str:
    tenant_task(store, agent, tenant, status, task_id)
    store.ledger.record(
        LedgerEntry(
            task_id=task_id,
            step=1,
            attempt=1,
            model=agent.model,
            prompt_tokens=30,
            completion_tokens=12,
            cost_usd=0.001,
            ttft_s=0.05,
            duration_s=0.2,
            served_by="gpu-1/r-1",
        )
    )
    return task_id


def _tenancy(store: Store, name: str, node: str) -> Tenancy:
    store.tenants.create(TenantSpec(name=name))
    agent = store.agents.register(
        AgentSpec(name=f"{name}-pricing", model=MODEL, instructions="Quote our prices."), name
    )
    tasks = (
        _task(store, agent, name, f"{name}-done", TaskStatus.completed),
        _task(store, agent, name, f"{name}-running", TaskStatus.running),
    )
    store.fleet.register(
        NodeSpec(
            node_id=node,
            datacenter="dc1",
            zone="z1",
            labels={"dedicated": name},
            gpus=[GpuDescription(index=0, uuid=f"GPU-{node}", type_name="H100-80GB", memory_total_mib=81559)],
        ),
        "secret",
    )
    store.fleet.set_trust(node, {"dedicated": name})  # an operator's word: a node's own label is not believed
    key = store.keys.create(Role.agent, name, name=f"{name}-tools").key
    return Tenancy(name=name, key=key, tasks=tasks, agent=agent.name, node=node)


@pytest.fixture
def world(store: Store, agent: AgentSpec) -> dict[str, Tenancy]:
    """Both tenants, with a shared agent (the `agent` fixture, registered by no tenant) besides their own."""
    return {name: _tenancy(store, name, node) for name, node in zip(TENANTS, ("gpu-1", "gpu-2"))}


def _fill(path: str, tenancy: Tenancy, task: str) -> str:
    """The route's path naming `tenancy`'s things (a model for a model route: models belong to nobody)."""
    names = {"/v1/models": MODEL, "/v1/agents": tenancy.agent, "/v1/tenants": tenancy.name}
    name = next((n for prefix, n in names.items() if path.startswith(prefix)), None)
    return path.format(task_id=task, seq=1, name=name, node_id=tenancy.node, call_id="call-1", model=MODEL)


def _same_words(answer: httpx.Response, missing: httpx.Response, theirs: str, made_up: str) -> None:
    """`answer` (about another tenant's `theirs`) says exactly what `missing` (about `made_up`) says."""
    assert answer.status_code == missing.status_code == 404, answer.text
    mine, ghost = error_of(answer), error_of(missing)
    assert {**mine, "message": mine["message"].replace(theirs, "X")} == {
        **ghost,
        "message": ghost["message"].replace(made_up, "X"),
    }


def _routes(app) -> Iterator[object]:
    """Every route the app serves, hidden ones (include_in_schema=False) too, which the OpenAPI schema omits;
    FastAPI 0.16x keeps an included router as one entry whose routes come from `effective_route_contexts`."""
    for route in app.routes:
        contexts = getattr(route, "effective_route_contexts", None)
        yield from (contexts() if contexts is not None else (route,))


def test_every_read_route_is_classified(app) -> None:
    served = {
        r.path_format
        for r in _routes(app)
        if "GET" in (getattr(r, "methods", None) or ()) and getattr(r, "path_format", "").startswith("/v1/")
    }
    assert "/v1/tasks/{task_id}" in served  # the walk above still finds the routes
    assert served == set(READ_ROUTES), (
        f"classify each new read route in READ_ROUTES: {sorted(served ^ set(READ_ROUTES))}"
    )


@pytest.mark.parametrize("reader, other", [TENANTS, TENANTS[::-1]], ids=["acme-reads", "globex-reads"])
@pytest.mark.parametrize("path", sorted(READ_ROUTES))
async def test_a_tenants_key_sees_nothing_of_another_tenant(
    app, world: dict[str, Tenancy], agent: AgentSpec, path: str, reader: str, other: str
) -> None:
    me, them = world[reader], world[other]
    kind = READ_ROUTES[path]
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app), base_url="http://berth", headers={"authorization": f"Bearer {me.key}"}
    ) as http:
        if kind in (TASK, TASK_PART):
            own = await http.get(_fill(path, me, me.tasks[0]))
            assert own.status_code == 200 or kind == TASK_PART and own.status_code != 404, own.text
            for theirs in them.tasks:
                made_up = f"{them.name}-ghost"
                _same_words(
                    await http.get(_fill(path, them, theirs)),
                    await http.get(_fill(path, them, made_up)),
                    theirs,
                    made_up,
                )
        elif kind == TASK_LIST:
            listed = await http.get(path)
            assert {t["task_id"] for t in listed.json()} == set(me.tasks)
            for params in ({"tenant": them.name}, {"parent": them.tasks[0]}, {"agent": them.agent}):
                assert (await http.get(path, params=params)).json() == [], params
        elif kind == AGENT:
            assert (await http.get(_fill(path, me, ""))).status_code == 200
            made_up = f"{them.name}-ghost"
            _same_words(
                await http.get(_fill(path, them, "")), await http.get(path.format(name=made_up)), them.agent, made_up
            )
        elif kind == AGENT_LIST:
            assert {a["name"] for a in (await http.get(path)).json()} == {me.agent, agent.name}
        elif kind == ADMIN:
            refused = await http.get(_fill(path, them, them.tasks[0]))
            assert refused.status_code == 403 and error_of(refused)["code"] == "forbidden", refused.text
        else:
            assert kind == FLEET
            seen = await http.get(_fill(path, them, them.tasks[0]))
            assert seen.status_code == 200, seen.text
            for secret in (them.name, *them.tasks, them.agent):
                assert secret not in seen.text, f"{path} shows {other}'s {secret!r} to {reader}"
