"""Helpers for the API tests (a module of its own: conftest files are not for importing)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx
from temporalio.client import Client as TemporalClient
from temporalio.service import RPCError

from orchestrator.store import Store
from sdk import AgentSpec, Client, Message, Spend, TaskSpec, TaskState, TaskStatus, ToolCall
from sdk.wire.contracts import CONTROL_TASK_QUEUE, WORKFLOW_NAME
from sdk.wire.task_run import TaskRun

# The `client_as` fixture: `async with client_as(Role.viewer, tenant="acme") as http: ...`
ClientAs = Callable[..., AbstractAsyncContextManager[httpx.AsyncClient]]


@dataclass
class Stack:
    """The `stack` fixture: the app in-process with a real worker behind it, and an admin's client of it."""

    client: Client
    store: Store
    app: Any

    def as_key(self, key: str) -> Client:
        """A client of the same app with another key (a task token, say)."""
        return Client("http://berth", api_key=key, transport=httpx.ASGITransport(self.app))


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def task_body(agent: AgentSpec, **fields: object) -> dict:
    body: dict = {"agent": agent.name, "input": "Summarise the report.", "budget": {"tokens": 5000}}
    body.update(fields)
    return body


def put_task(store: Store, agent: AgentSpec, status: TaskStatus = TaskStatus.running, **fields: object) -> TaskState:
    """A task row as the workflow leaves it, written straight into the store."""
    task_id = unique("t")
    spec = TaskSpec(task_id=task_id, agent=agent.name, input="Summarise the report.", budget={"tokens": 5000})
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
        **fields,
    )
    assert store.tasks.create(task_id, spec.model_dump_json(), state)
    return state


async def started_run(client: TemporalClient, task_id: str) -> TaskRun:
    """The TaskRun the workflow was started with, read back from its history."""
    history = await client.get_workflow_handle(task_id).fetch_history()
    started = history.events[0].workflow_execution_started_event_attributes
    assert started.workflow_type.name == WORKFLOW_NAME
    assert started.task_queue.name == CONTROL_TASK_QUEUE
    [run] = await client.data_converter.decode(started.input.payloads, [TaskRun])
    return run


def error_of(response: httpx.Response) -> dict:
    body = response.json()
    assert set(body) >= {"error"}, body
    assert set(body["error"]) == {"code", "message", "field"}, body
    return body["error"]


def write_checkpoints(store: Store, task_id: str) -> None:
    """Seq 0 (the prompt) and seq 1 (one step with a tool call), as the workflow writes them."""
    root = store.checkpoints.write_root(
        task_id, [Message(role="system", content="Write briefly."), Message(role="user", content="Summarise.")], {}
    )
    store.checkpoints.append(
        task_id,
        root,
        1,
        [
            Message(role="assistant", tool_calls=[ToolCall(id="c1", name="lookup", arguments='{"word": "berth"}')]),
            Message(role="tool", tool_call_id="c1", name="lookup", content="a ship's place at a wharf"),
        ],
        {"notes": ["looked up berth"]},
        {"step": 1},
    )


async def end_workflows(temporal: TemporalClient, store: Store, why: str) -> None:
    """Terminate the workflow of every task in `store`: no worker will run them, and a later test's worker on
    the control queue must not pick up a task whose agent its own store does not know."""
    for state in store.tasks.list(limit=500):
        try:
            await temporal.get_workflow_handle(state.task_id).terminate(why)
        except RPCError:
            pass


def tenant_task(
    store: Store, agent: AgentSpec, tenant: str, status: TaskStatus = TaskStatus.running, task_id: str | None = None
) -> TaskState:
    """A task row of `tenant`, with two checkpoints and an interruption, as a workflow leaves it."""
    task_id = task_id or unique("t")
    spec = TaskSpec(
        task_id=task_id, agent=agent.name, input="Count the crates.", budget={"tokens": 5000}, tenant=tenant
    )
    state = TaskState(
        task_id=task_id,
        agent=agent.name,
        agent_version=agent.version,
        model=agent.model,
        tenant=tenant,
        status=status,
        max_steps=agent.max_steps,
        spend=Spend(token_limit=5000),
        updated_at=datetime.now(UTC),
    )
    assert store.tasks.create(task_id, spec.model_dump_json(), state)
    write_checkpoints(store, task_id)
    store.events.append(task_id, "interruption", {"node": "gpu-1"})
    return state
