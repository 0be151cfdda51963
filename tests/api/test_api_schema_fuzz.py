"""Property-based fuzzing of every operation in the app's own OpenAPI schema (schemathesis).

The real app runs in-process over the real SQLite store and the real Temporal dev server; each
operation gets valid and invalid requests generated from its schema, sent with an admin key
(schemathesis also drops or garbles it in some), and every answer must be a documented status
with a body and content type that match the schema, and never a 5xx.

Generated ids alone would only ever meet 404s, so ids are swapped, some of the time, for those of
rows seeded beforehand (a running task with checkpoints, a ledger lease and events, a finished
one, a registered agent, a node, a tenant, a spare key): in the path by parameter name, in
bodies by key at any depth, and the node secret header. Nothing is excluded: the node agents'
routes (join, heartbeat, step books) are fuzzed like the rest and must refuse junk with a 4xx.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
import schemathesis
from api_helpers import write_checkpoints
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from schemathesis import Case, CheckContext, Response
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from temporalio.client import Client as TemporalClient
from temporalio.service import RPCError

from orchestrator.api import TemporalGateway, events
from orchestrator.config import BerthConfig
from orchestrator.store import LeaseRecord, Store
from sdk import AgentSpec, Spend, TaskSpec, TaskState, TaskStatus, ToolSpec
from sdk.wire.fleet import NODE_SECRET_HEADER, GpuDescription, NodeSpec
from sdk.wire.identity import Role, TenantSpec, TenantUpdate

JOIN_TOKEN = "join-fuzz-7a2e"
NODE_ID = "gpu-fuzz"
NODE_SECRET = "fuzz-node-secret"
TENANT = "fuzz-tenant"
NO_WORKER = "did not answer within"  # orchestrator.api.temporal_gateway, when no worker runs an update


def not_a_server_error_but_no_worker(ctx: CheckContext, response: Response, case: Case) -> bool | None:
    """No 5xx, but one: no worker polls this test's queue, so a task the fuzzer submitted stays queued and an
    update to it (raise budget, spawn) answers the documented 503 "did not answer", as it should."""
    if response.status_code == 503 and NO_WORKER.encode() in response.content:
        return None
    return not_a_server_error(ctx, response, case)


# Every answer: no 5xx, a documented status, a body and content type as documented.
CHECKS = [
    not_a_server_error_but_no_worker,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


@dataclass(frozen=True)
class Seeded:
    """Rows the fuzzer's ids are sometimes swapped for: in the path by parameter name, in bodies by key."""

    path_ids: dict[str, list[str]]
    body_refs: dict[str, str]
    finished_task: str


@pytest.fixture
def config(tmp_path: Path) -> BerthConfig:
    return BerthConfig(data_dir=tmp_path, database_url=f"sqlite:///{tmp_path}/berth.db", join_token=JOIN_TOKEN)


@pytest.fixture
async def gateway(temporal_client: TemporalClient) -> AsyncIterator[TemporalGateway]:
    """A task queue of this test's own, so that no other test's worker runs what the fuzzer starts, and short
    timeouts: an update to a workflow no worker runs answers 503 within a second instead of fifteen."""
    queue = f"fuzz-{uuid.uuid4().hex[:8]}"
    yield TemporalGateway(
        temporal_client.service_client.config.target_host,
        temporal_client.namespace,
        client=temporal_client,
        task_queue=queue,
        query_timeout_s=0.5,
        update_timeout_s=1.0,
    )
    async for execution in temporal_client.list_workflows(f'TaskQueue="{queue}" AND ExecutionStatus="Running"'):
        try:
            await temporal_client.get_workflow_handle(execution.id).terminate("API fuzz test over")
        except RPCError:
            pass


def _task(store: Store, agent: AgentSpec, task_id: str, status: TaskStatus) -> str:
    """A task row as its workflow leaves it, with a fixed id so that every run fuzzes the same thing."""
    spec = TaskSpec(task_id=task_id, agent=agent.name, input="Count the crates.", budget={"tokens": 5000})
    state = TaskState(
        task_id=task_id,
        agent=agent.name,
        agent_version=agent.version,
        model=agent.model,
        tenant="default",
        status=status,
        max_steps=agent.max_steps,
        spend=Spend(token_limit=5000),
        updated_at=datetime.now(UTC),
    )
    assert store.tasks.create(task_id, spec.model_dump_json(), state)
    write_checkpoints(store, task_id)
    store.events.append(task_id, "interruption", {"node": NODE_ID})
    return task_id


@pytest.fixture
def seeded(store: Store) -> Seeded:
    agent = store.agents.register(
        AgentSpec(
            name="fuzz-writer",
            model="llama-3.1-8b",
            instructions="Write briefly.",
            tools=[ToolSpec(name="lookup", description="Look a word up.")],
        )
    )
    store.tenants.create(TenantSpec(name=TENANT, default_budget_tokens=5000))
    store.tenants.update("default", TenantUpdate(default_budget_tokens=5000))
    running = _task(store, agent, "fuzz-running", TaskStatus.running)
    finished = _task(store, agent, "fuzz-finished", TaskStatus.completed)
    store.fleet.register(
        NodeSpec(
            node_id=NODE_ID,
            datacenter="dc1",
            zone="z1",
            gpus=[GpuDescription(index=0, uuid="GPU-fuzz", type_name="H100-80GB", memory_total_mib=81559)],
        ),
        NODE_SECRET,
    )
    store.leases.add(
        LeaseRecord(
            lease_id="lease-fuzz",
            task_id=running,
            step=1,
            model=agent.model,
            node_id=NODE_ID,
            replica_id="r-fuzz",
            tokens=500,
            tenant="default",
        )
    )
    spare = store.keys.create(Role.viewer, name="fuzz-spare").key_id  # never the admin key: revoking it ends the run
    return Seeded(
        path_ids={
            "task_id": [running, finished],
            "node_id": [NODE_ID],
            "key_id": [spare],
            "seq": ["0", "1"],
            "name": [agent.name, agent.model, TENANT, "default"],
        },
        body_refs={
            "agent": agent.name,
            "model": agent.model,
            "task_id": running,
            "tenant": TENANT,
            "node_id": NODE_ID,
            "type_name": "H100-80GB",
            "join_token": JOIN_TOKEN,
        },
        finished_task=finished,
    )


@pytest.fixture
def api_schema(app, seeded: Seeded, monkeypatch: pytest.MonkeyPatch):
    # A finished task's stream ends after a few quiet polls; make those quick.
    monkeypatch.setattr(events, "POLL_INTERVAL_S", 0.01)
    return schemathesis.openapi.from_asgi("/openapi.json", app)


@pytest.fixture(autouse=True)
def _node_id_for_schemathesis(request: pytest.FixtureRequest) -> None:
    """schemathesis 4.32 reads and renames `item._nodeid`, which pytest 9 no longer has (`nodeid` is derived);
    giving it one back is all its lazy loader needs (subtests still report each operation by name)."""
    request.node._nodeid = request.node.nodeid


schema = schemathesis.pytest.from_fixture("api_schema")


def refer_to_seeded(body: object, refs: dict[str, str], data: st.DataObject) -> None:
    """Swap, some of the time, a body's references (an agent, a model, a task, a GPU type, the join token) for
    seeded ones at any depth, so that a well-formed body gets past the lookups to the code behind them."""
    if isinstance(body, list):
        for item in body:
            refer_to_seeded(item, refs, data)
    elif isinstance(body, dict):
        for key, value in body.items():
            if key in refs and isinstance(value, str) and data.draw(st.booleans(), label=f"seed {key}"):
                body[key] = refs[key]
            else:
                refer_to_seeded(value, refs, data)


@settings(max_examples=20, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
@schema.given(data=st.data())
@schema.parametrize()
def test_every_operation_answers_as_documented(case, data: st.DataObject, seeded: Seeded, admin_key: str) -> None:
    for name in case.path_parameters or {}:
        if name in seeded.path_ids and data.draw(st.booleans(), label=f"seed {name}"):
            choices = seeded.path_ids[name]
            if case.operation.path.endswith("/events"):
                choices = [seeded.finished_task]  # a running task's stream never ends
            case.path_parameters[name] = data.draw(st.sampled_from(choices), label=name)
    if NODE_SECRET_HEADER in (case.headers or {}) and data.draw(st.booleans(), label="right node secret"):
        case.headers[NODE_SECRET_HEADER] = NODE_SECRET
    refer_to_seeded(case.body, seeded.body_refs, data)
    case.call_and_validate(headers={"Authorization": f"Bearer {admin_key}"}, checks=CHECKS, timeout=10)
