"""The SDK's Client against the real app (in-process transport), typed exceptions included."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest
from api_helpers import put_task, unique, write_checkpoints

from orchestrator.store import Store
from sdk import (
    Agent,
    AgentSpec,
    ApiUnreachable,
    BerthError,
    Budget,
    BudgetExhausted,
    Client,
    Conflict,
    Forbidden,
    InvalidSpec,
    NotFound,
    TaskCancelled,
    TaskFailed,
    TaskStatus,
    Unauthorized,
    tool,
)
from sdk._client import error_from_response
from sdk.wire.identity import TenantSpec, TenantUpdate


@pytest.fixture
async def client(app, admin_key: str) -> AsyncIterator[Client]:
    async with Client("http://berth", api_key=admin_key, transport=httpx.ASGITransport(app)) as client:
        yield client


@tool
def peek(place: str) -> str:
    """Peek at a place."""
    return f"nothing at {place}"


async def test_register_an_agent_object_and_submit_to_it(client: Client, store: Store) -> None:
    store.tenants.create(TenantSpec(name="acme"))
    scout = Agent(unique("scout"), "llama-3.2-1b", "Look around.", [peek])

    registered = await client.register(scout)
    handle = await client.submit(scout, "What is there?", budget=Budget(tokens=3000, usd=1.0), tenant="acme")

    assert registered.version == scout.spec().version
    assert [a.name for a in await client.agents()] == [scout.name]
    assert (await client.agent(scout.name)).tools[0].name == "peek"
    state = await handle.status()
    assert state.status == TaskStatus.queued and state.spend.token_limit == 3000 and state.tenant == "acme"
    assert [s.task_id for s in await client.tasks(agent=scout.name)] == [handle.task_id]
    assert store.tasks.get(handle.task_id) is not None


async def test_submit_is_idempotent_by_task_id_and_conflicts_on_another_spec(client: Client, agent: AgentSpec) -> None:
    task_id = unique("t")
    first = await client.submit(agent.name, "Write a haiku.", 2000, task_id=task_id)
    again = await client.submit(agent.name, "Write a haiku.", 2000, task_id=task_id)
    assert first.task_id == again.task_id == f"default:{task_id}"  # a chosen id is its tenant's

    with pytest.raises(Conflict) as refused:
        await client.submit(agent.name, "Write a sonnet.", 2000, task_id=task_id)
    assert refused.value.field == "task_id" and refused.value.status_code == 409


async def test_server_refusals_arrive_as_typed_exceptions_with_the_field(client: Client, agent: AgentSpec) -> None:
    with pytest.raises(InvalidSpec) as unknown_agent:
        await client.submit("nobody-" + unique("x"), "hello", 100)
    assert unknown_agent.value.field == "agent" and "not registered" in unknown_agent.value.message

    with pytest.raises(InvalidSpec) as unknown_model:
        await client.submit(agent, "hello", 100, model="gpt-17")
    assert unknown_model.value.field == "model" and unknown_model.value.status_code == 422

    with pytest.raises(InvalidSpec) as bad_agent:
        await client.register(AgentSpec(name=unique("bad"), model="gpt-17"))
    assert bad_agent.value.field == "model"

    with pytest.raises(NotFound):
        await client.task(unique("missing")).status()
    with pytest.raises(NotFound):
        await client.agent(unique("missing"))


async def test_specs_the_sdk_can_check_are_refused_before_sending(client: Client, agent: AgentSpec) -> None:
    for kwargs, field in [
        ({"input": "  "}, "input"),
        ({"budget": 0}, "budget.tokens"),
        ({"priority": 12}, "priority"),
        ({"budget": None}, "budget"),
    ]:
        arguments = {"agent": agent, "input": "hello", "budget": 100, **kwargs}
        with pytest.raises(InvalidSpec) as refused:
            await client.submit(**arguments)
        assert refused.value.field == field and refused.value.status_code is None


async def test_steering_a_finished_task_is_a_conflict(client: Client, store: Store, agent: AgentSpec) -> None:
    done = client.task(put_task(store, agent, TaskStatus.completed, result="ok").task_id)
    with pytest.raises(Conflict, match="already ended"):
        await done.cancel()
    with pytest.raises(Conflict):
        await done.raise_budget(100)
    with pytest.raises(Conflict):
        await done.answer("yes")
    with pytest.raises(InvalidSpec) as nothing:
        await done.raise_budget(0)
    assert nothing.value.field == "tokens"


@pytest.mark.parametrize(
    ("status", "error", "expected"),
    [
        (TaskStatus.out_of_budget, "budget exhausted", BudgetExhausted),
        (TaskStatus.failed, "tool crashed", TaskFailed),
        (TaskStatus.max_steps, "ran 7 steps", TaskFailed),
        (TaskStatus.cancelled, "by request", TaskCancelled),
    ],
)
async def test_result_raises_how_the_task_ended(
    client: Client, store: Store, agent: AgentSpec, status: TaskStatus, error: str, expected: type
) -> None:
    task = put_task(store, agent, status, error=error, result="partial")

    with pytest.raises(expected) as ended:
        await client.task(task.task_id).result()

    assert ended.value.state.status == status and ended.value.state.result == "partial"
    assert error in str(ended.value)


async def test_result_waits_on_the_event_stream_for_a_running_task(
    client: Client, store: Store, agent: AgentSpec
) -> None:
    task = put_task(store, agent)
    store.events.append(task.task_id, "state", {"status": "running"})

    async def finish() -> None:
        await asyncio.sleep(0.5)
        await asyncio.to_thread(store.events.append, task.task_id, "step", {"step": 1})
        await asyncio.to_thread(
            store.tasks.save_state, task.model_copy(update={"status": TaskStatus.completed, "result": "the answer"})
        )

    finishing = asyncio.create_task(finish())
    assert await client.task(task.task_id).result() == "the answer"
    await finishing


async def test_events_iterate_until_the_task_is_final(client: Client, store: Store, agent: AgentSpec) -> None:
    task = put_task(store, agent, TaskStatus.completed)
    seqs = [store.events.append(task.task_id, kind, {"n": i}) for i, kind in enumerate(["state", "step", "state"])]

    events = [e async for e in client.task(task.task_id).events()]

    assert [(e.seq, e.kind, e.data) for e in events] == [
        (seqs[0], "state", {"n": 0}),
        (seqs[1], "step", {"n": 1}),
        (seqs[2], "state", {"n": 2}),
    ]
    resumed = [e.seq async for e in client.task(task.task_id).events(after=seqs[1])]
    assert resumed == seqs[2:]


class CutFirstStream(httpx.AsyncBaseTransport):
    """Passes requests to the app, but cuts the first event stream after its first message,
    as a proxy or a restarting server would; records the requests it saw."""

    def __init__(self, app) -> None:
        self.inner = httpx.ASGITransport(app)
        self.requests: list[httpx.Request] = []
        self.cut = False

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        response = await self.inner.handle_async_request(request)
        if self.cut or not request.url.path.endswith("/events"):
            return response
        self.cut = True
        body = await response.aread()
        first = body.split(b"\r\n\r\n")[0] + b"\r\n\r\n"

        class Truncated(httpx.AsyncByteStream):
            async def __aiter__(self) -> AsyncIterator[bytes]:
                yield first
                raise httpx.RemoteProtocolError("peer closed connection without completing the body")

        return httpx.Response(response.status_code, headers=response.headers, stream=Truncated())


async def test_a_cut_event_stream_reconnects_with_last_event_id(
    app, store: Store, agent: AgentSpec, admin_key: str
) -> None:
    task = put_task(store, agent, TaskStatus.completed)
    seqs = [store.events.append(task.task_id, "step", {"step": i}) for i in range(3)]
    transport = CutFirstStream(app)

    async with Client("http://berth", api_key=admin_key, transport=transport) as client:
        events = [e async for e in client.task(task.task_id).events()]

    assert [e.seq for e in events] == seqs
    streams = [r for r in transport.requests if r.url.path.endswith("/events")]
    assert len(streams) == 2
    assert "last-event-id" not in streams[0].headers
    assert streams[1].headers["last-event-id"] == str(seqs[0])


async def test_checkpoints_fork_and_ledger_through_the_handle(client: Client, store: Store, agent: AgentSpec) -> None:
    source = put_task(store, agent, TaskStatus.completed)
    write_checkpoints(store, source.task_id)
    handle = client.task(source.task_id)

    assert [c.seq for c in await handle.checkpoints()] == [0, 1]
    assert [m.role for m in (await handle.checkpoint(1)).messages] == ["system", "user", "assistant", "tool"]
    ledger = await handle.ledger()
    assert ledger.entries == [] and ledger.totals.calls == 0

    forked = await handle.fork(1, budget=1234)
    assert (await forked.status()).spend.token_limit == 1234
    with pytest.raises(NotFound) as missing:
        await handle.fork(9)
    assert missing.value.field == "checkpoint_seq"


async def test_an_unreachable_api_is_its_own_error(closed_port: int) -> None:
    async with Client(f"http://127.0.0.1:{closed_port}", timeout=5) as client:
        with pytest.raises(ApiUnreachable, match="cannot reach"):
            await client.tasks()


def test_status_codes_map_to_exception_types() -> None:
    def response(status: int, body: object) -> httpx.Response:
        return httpx.Response(status, json=body, request=httpx.Request("GET", "http://berth/v1/tasks"))

    shaped = {"error": {"code": "x", "message": "the reason", "field": "budget.tokens"}}
    for status, cls in [
        (422, InvalidSpec),
        (404, NotFound),
        (409, Conflict),
        (401, Unauthorized),
        (403, Forbidden),
        (503, BerthError),
    ]:
        error = error_from_response(response(status, shaped))
        assert type(error) is cls
        assert (error.message, error.field, error.status_code) == ("the reason", "budget.tokens", status)
        assert str(error) == "budget.tokens: the reason"
    assert issubclass(Forbidden, Unauthorized)  # code that caught Unauthorized for a 403 still does
    unshaped = error_from_response(httpx.Response(502, text="Bad Gateway", request=httpx.Request("GET", "http://b/")))
    assert type(unshaped) is BerthError and unshaped.message == "Bad Gateway"


async def test_the_sdk_manages_tenants_and_keys_and_reads_the_audit(client: Client) -> None:
    name = unique("sdk-tenant")
    made = await client.create_tenant(TenantSpec(name=name, default_budget_tokens=700))
    assert made.name == name and name in [t.name for t in await client.tenants()]
    assert (await client.update_tenant(name, TenantUpdate(gpu_quota=3))).gpu_quota == 3
    assert (await client.tenant(name)).default_budget_tokens == 700
    key = await client.create_key("agent", name, name="sdk")
    assert key.key.startswith(f"berth_{key.key_id}_") and key.tenant == name
    assert "key" not in (await client.keys())[-1].model_dump()
    assert (await client.revoke_key(key.key_id)).revoked_at is not None
    with pytest.raises(InvalidSpec) as refused:
        await client.create_key("boss")
    assert refused.value.field == "role"
    audit = await client.audit(limit=3)
    assert [(a.method, a.status) for a in audit] == [("POST", 200), ("POST", 201), ("PATCH", 200)]
