"""What the attacker tests share: the cluster join token, a sync transport for node books, the error shape."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import httpx
import sqlalchemy as sa
from temporalio.client import Client as TemporalClient

from orchestrator.store import LeaseRecord, Store
from orchestrator.store.tables import StepAttemptRow, table_of
from sdk import Agent, TaskState, TaskStatus
from sdk.wire.fleet import NODE_SECRET_HEADER
from sdk.wire.identity import Role
from sdk.wire.lease import StepLimits
from sdk.wire.task_events import KIND_OF, Interruption

JOIN_TOKEN = "join-security-6b1f"


class SyncAsgi(httpx.BaseTransport):
    """The app in-process for a synchronous client (a node's step books): each request runs in a fresh loop."""

    def __init__(self, app) -> None:
        self._asgi = httpx.ASGITransport(app)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        async def run() -> httpx.Response:
            replay = httpx.Request(request.method, request.url, headers=request.headers, content=request.read())
            response = await self._asgi.handle_async_request(replay)
            return httpx.Response(response.status_code, headers=response.headers, content=await response.aread())

        return asyncio.run(run())


def step_lease(
    lease_id: str, task_id: str, tenant: str, node_id: str, replica_id: str, limits: StepLimits, step: int = 1
) -> LeaseRecord:
    """A lease of the task's `step` on `node_id`, under the workflow's `limits`."""
    return LeaseRecord(
        lease_id=lease_id,
        task_id=task_id,
        step=step,
        model="llama-3.2-1b",
        node_id=node_id,
        replica_id=replica_id,
        tokens=limits.max_tokens,
        tenant=tenant,
        limits=limits,
    )


def backdate_prepares(store: Store, lease_id: str, seconds: float) -> None:
    """Move the recorded prepares of a lease's attempts `seconds` into the past: what a node that waited sees."""
    attempts = table_of(StepAttemptRow)
    with store.engine.begin() as connection:
        rows = connection.execute(sa.select(attempts).where(attempts.c.lease_id == lease_id)).all()
        for row in rows:
            connection.execute(
                sa.update(attempts)
                .where(
                    attempts.c.task_id == row.task_id, attempts.c.step == row.step, attempts.c.attempt == row.attempt
                )
                .values(prepared_at=row.prepared_at - timedelta(seconds=seconds))
            )


def cut_seen(store: Store, task_id: str, step: int, tokens: int) -> None:
    """What the workflow writes when it moves a cut step on: the tokens the cut generation's heartbeats carried
    (an `interruption` event), the evidence a node's booking of dead tokens is held to."""
    cut = Interruption(step=step, kind="lost", tokens_lost=tokens)
    store.events.append(task_id, KIND_OF[Interruption], cut.model_dump(mode="json"))


def error_of(response: httpx.Response) -> dict:
    body = response.json()
    assert set(body) >= {"error"}, body
    assert set(body["error"]) == {"code", "message", "field"}, body
    return body["error"]


@dataclass
class Live:
    """The app with a real worker behind it (`live` fixture): tasks run on the simulated engine."""

    app: Any
    store: Store
    temporal: TemporalClient
    queue: str

    @asynccontextmanager
    async def as_key(self, key: str) -> AsyncIterator[httpx.AsyncClient]:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(self.app), base_url="http://berth", headers={"authorization": f"Bearer {key}"}
        ) as client:
            yield client

    def key(self, role: Role = Role.admin, tenant: str | None = None) -> str:
        return self.store.keys.create(role, tenant, name=f"security-{role.value}").key

    def register(self, agent: Agent, tenant: str | None = None) -> None:
        self.store.agents.register(agent.spec(), tenant=tenant)

    async def wait_for(
        self, http: httpx.AsyncClient, task_id: str, *statuses: TaskStatus, timeout_s: float = 120
    ) -> TaskState:
        """The task's state once it is in one of `statuses` (a generous deadline: the suite runs on busy machines)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            answer = await http.get(f"/v1/tasks/{task_id}")
            # A sub-agent's row is written by its own workflow's first state: a moment after its spawn answered.
            assert answer.status_code in (200, 404), answer.text
            if answer.status_code == 200:
                state = TaskState.model_validate(answer.json())
                if state.status in statuses:
                    return state
            assert loop.time() < deadline, f"{task_id} is not {[s.value for s in statuses]}: {answer.text}"
            await asyncio.sleep(0.2)


@contextmanager
def admitted_node(app, store: Store, node_id: str) -> Iterator[httpx.Client]:
    """A node admitted with a per-node token and joined with one H100, speaking HTTP to `app` with its own secret."""
    token = store.node_admission.mint(node_id, 600).join_token
    with httpx.Client(transport=SyncAsgi(app), base_url="http://berth") as http:
        joined = http.post(
            "/v1/nodes/register",
            json={
                "node_id": node_id,
                "join_token": token,
                "datacenter": "dc1",
                "zone": "z1",
                "gpus": [{"index": 0, "uuid": "GPU-0", "type_name": "H100-80GB", "memory_total_mib": 81559}],
            },
        )
        assert joined.status_code == 201, joined.text
        http.headers[NODE_SECRET_HEADER] = joined.json()["node_secret"]
        yield http
