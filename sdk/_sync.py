"""Blocking twins of `Client` and `TaskHandle`, for scripts and notebooks.

    from sdk import SyncClient, Budget

    with SyncClient() as client:
        task = client.submit("researcher", "find three sources", budget=Budget(tokens=20_000))
        for event in task.events():
            print(event.kind, event.data)
        print(task.result())

`SyncClient` mirrors every `Client` method, and `SyncTaskHandle` every `TaskHandle` method and
property, with the same arguments and return types (a `SyncTaskHandle` where the async client
returns a `TaskHandle`); tests/unit/test_sync_twins.py fails on a method one has and the other
lacks, so a method added to one is added to both. Each call runs the async
method on a private event loop in a background thread, so the blocking API also works where
an event loop is already running (Jupyter), and there is one implementation of the protocol.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncGenerator, Coroutine, Iterator
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel

from ._budget import Budget
from ._client import Client, TaskHandle
from ._settings import ModelSettings
from ._spec import AgentSpec
from ._state import Spend, TaskEvent, TaskState, TaskStatus
from ._stream import StreamEvent, TextReset, TokenDelta, Writing
from .wire.catalogue import CatalogueModel, ModelEntry, PrewarmStarted, ScalingPolicy
from .wire.fleet import DEFAULT_ADMIT_TTL_S, NodeAdmission, NodeRevocation, NodeView, ReplicaView
from .wire.identity import ApiKeyView, AuditEntry, CreatedKey, Role, Tenant, TenantSpec, TenantUpdate
from .wire.lease import ServiceClass
from .wire.loop_approvals import ApprovalRequest, LoopApprovals
from .wire.objectives import LatencyObjectives
from .wire.resources import CheckpointDetail, CheckpointSummary, Ledger

T = TypeVar("T")


class _LoopThread:
    """An event loop running forever in a daemon thread; `run` blocks on one coroutine."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="berth-sdk-loop", daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result()
        except BaseException:
            # Ctrl-C in the caller must not leave the request running on in the background.
            future.cancel()
            raise

    def close(self) -> None:
        if self._loop.is_closed():
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()


class SyncClient:
    """A blocking Berth API client; same arguments as `Client`. Close it (or use `with`)."""

    def __init__(
        self,
        url: str | None = None,
        api_key: str | None = None,
        timeout: float = 30,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._loop = _LoopThread()
        self._client = Client(url, api_key, timeout, transport=transport)

    @property
    def url(self) -> str:
        return self._client.url

    @property
    def timeout(self) -> float:
        return self._client.timeout

    def __enter__(self) -> SyncClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if not self._loop._loop.is_closed():
            self._loop.run(self._client.aclose())
        self._loop.close()

    def register(self, agent: Any) -> AgentSpec:
        return self._loop.run(self._client.register(agent))

    def agents(self) -> list[AgentSpec]:
        return self._loop.run(self._client.agents())

    def agent(self, name: str) -> AgentSpec:
        return self._loop.run(self._client.agent(name))

    def models(self) -> list[CatalogueModel]:
        return self._loop.run(self._client.models())

    def model(self, name: str) -> CatalogueModel:
        return self._loop.run(self._client.model(name))

    def put_model(self, entry: ModelEntry) -> CatalogueModel:
        return self._loop.run(self._client.put_model(entry))

    def set_policy(self, name: str, policy: ScalingPolicy) -> CatalogueModel:
        return self._loop.run(self._client.set_policy(name, policy))

    def prewarm(self, model: str, datacenter: str | None = None) -> PrewarmStarted:
        return self._loop.run(self._client.prewarm(model, datacenter))

    def nodes(self, status: str | None = None, datacenter: str | None = None) -> list[NodeView]:
        return self._loop.run(self._client.nodes(status, datacenter))

    def node(self, node_id: str) -> NodeView:
        return self._loop.run(self._client.node(node_id))

    def drain(self, node_id: str) -> NodeView:
        return self._loop.run(self._client.drain(node_id))

    def preempt_node(self, node_id: str, notice_s: float = 30.0) -> NodeView:
        return self._loop.run(self._client.preempt_node(node_id, notice_s))

    def undrain(self, node_id: str) -> NodeView:
        return self._loop.run(self._client.undrain(node_id))

    def admit_node(self, node_id: str, ttl_s: int = DEFAULT_ADMIT_TTL_S) -> NodeAdmission:
        return self._loop.run(self._client.admit_node(node_id, ttl_s))

    def approve_node(self, node_id: str) -> NodeView:
        return self._loop.run(self._client.approve_node(node_id))

    def revoke_node(self, node_id: str) -> NodeRevocation:
        return self._loop.run(self._client.revoke_node(node_id))

    def remove_node(self, node_id: str) -> NodeRevocation:
        return self._loop.run(self._client.remove_node(node_id))

    def replicas(self, model: str | None = None) -> list[ReplicaView]:
        return self._loop.run(self._client.replicas(model))

    def create_key(
        self, role: Role | str, tenant: str | None = None, name: str = "", description: str = ""
    ) -> CreatedKey:
        return self._loop.run(self._client.create_key(role, tenant, name, description))

    def keys(self) -> list[ApiKeyView]:
        return self._loop.run(self._client.keys())

    def revoke_key(self, key_id: str) -> ApiKeyView:
        return self._loop.run(self._client.revoke_key(key_id))

    def create_tenant(self, spec: TenantSpec) -> Tenant:
        return self._loop.run(self._client.create_tenant(spec))

    def tenants(self) -> list[Tenant]:
        return self._loop.run(self._client.tenants())

    def tenant(self, name: str) -> Tenant:
        return self._loop.run(self._client.tenant(name))

    def update_tenant(self, name: str, change: TenantUpdate) -> Tenant:
        return self._loop.run(self._client.update_tenant(name, change))

    def audit(self, key_id: str | None = None, limit: int = 100) -> list[AuditEntry]:
        return self._loop.run(self._client.audit(key_id, limit))

    def submit(
        self,
        agent: Any,
        input: str,
        budget: Budget | int,
        task_id: str | None = None,
        tenant: str | None = None,
        priority: int = 0,
        model: str | None = None,
        max_steps: int | None = None,
        budget_grace_s: float | None = None,
        service_class: ServiceClass = "interactive",
        settings: ModelSettings | None = None,
        objectives: LatencyObjectives | None = None,
    ) -> SyncTaskHandle:
        handle = self._loop.run(
            self._client.submit(
                agent,
                input,
                budget,
                task_id,
                tenant,
                priority,
                model,
                max_steps,
                budget_grace_s,
                service_class,
                settings,
                objectives,
            )
        )
        return SyncTaskHandle(self._loop, handle)

    def task(self, task_id: str, output_type: type[BaseModel] | None = None) -> SyncTaskHandle:
        return SyncTaskHandle(self._loop, self._client.task(task_id, output_type))

    def tasks(
        self,
        status: TaskStatus | str | None = None,
        agent: str | None = None,
        limit: int = 100,
        *,
        tenant: str | None = None,
        parent: str | None = None,
        offset: int = 0,
    ) -> list[TaskState]:
        return self._loop.run(self._client.tasks(status, agent, limit, tenant=tenant, parent=parent, offset=offset))


class SyncTaskHandle:
    """The blocking twin of `TaskHandle`; see there for what each method does."""

    def __init__(self, loop: _LoopThread, handle: TaskHandle) -> None:
        self._loop = loop
        self._handle = handle
        self.task_id = handle.task_id
        self.output_type = handle.output_type

    def __repr__(self) -> str:
        return f"SyncTaskHandle({self.task_id!r})"

    def status(self) -> TaskState:
        return self._loop.run(self._handle.status())

    def result(self, timeout: float | None = None) -> Any:
        return self._loop.run(self._handle.result(timeout))

    def stream(self, after: int = 0) -> Iterator[StreamEvent | TokenDelta | TextReset]:
        """`TaskHandle.stream`, for scripts: typed events and the answer's text as it is written."""
        return self._follow(self._handle.stream(after))

    def events(self, after: int = 0) -> Iterator[TaskEvent]:
        return self._follow(self._handle.events(after))

    def _follow(self, stream: AsyncGenerator[T, None]) -> Iterator[T]:
        try:
            while True:
                try:
                    yield self._loop.run(stream.__anext__())
                except StopAsyncIteration:
                    return
        finally:
            self._loop.run(stream.aclose())

    def writing(self) -> Writing:
        return self._loop.run(self._handle.writing())

    def cancel(self, reason: str = "cancelled by request") -> TaskState:
        return self._loop.run(self._handle.cancel(reason))

    def raise_budget(self, tokens: int, usd: float = 0.0) -> Spend:
        return self._loop.run(self._handle.raise_budget(tokens, usd))

    def spawn(self, agent: str, input: str, tokens: int | None = None) -> SyncTaskHandle:
        return SyncTaskHandle(self._loop, self._loop.run(self._handle.spawn(agent, input, tokens)))

    def token(self) -> str:
        return self._loop.run(self._handle.token())

    def answer(self, text: str) -> TaskState:
        return self._loop.run(self._handle.answer(text))

    def approve(self, call_id: str | None = None) -> TaskState:
        return self._loop.run(self._handle.approve(call_id))

    def reject(self, reason: str | None = None, call_id: str | None = None) -> TaskState:
        return self._loop.run(self._handle.reject(reason, call_id))

    def checkpoints(self) -> list[CheckpointSummary]:
        return self._loop.run(self._handle.checkpoints())

    def checkpoint(self, seq: int) -> CheckpointDetail:
        return self._loop.run(self._handle.checkpoint(seq))

    def fork(
        self,
        checkpoint_seq: int,
        budget: Budget | int | None = None,
        model: str | None = None,
        task_id: str | None = None,
        max_steps: int | None = None,
        input: str | None = None,
    ) -> SyncTaskHandle:
        forked = self._loop.run(self._handle.fork(checkpoint_seq, budget, model, task_id, max_steps, input))
        return SyncTaskHandle(self._loop, forked)

    def simulate_preemption(self) -> TaskState:
        return self._loop.run(self._handle.simulate_preemption())

    @property
    def openai_base_url(self) -> str:
        return self._handle.openai_base_url

    def kept_tool_result(self, call_id: str) -> str | None:
        return self._loop.run(self._handle.kept_tool_result(call_id))

    def keep_tool_result(self, call_id: str, content: str) -> None:
        self._loop.run(self._handle.keep_tool_result(call_id, content))

    def finish(self, output: str | None = None, error: str | None = None) -> TaskState:
        return self._loop.run(self._handle.finish(output, error))

    def approvals(self) -> LoopApprovals | None:
        return self._loop.run(self._handle.approvals())

    def ask_approval(self, request: ApprovalRequest) -> LoopApprovals:
        return self._loop.run(self._handle.ask_approval(request))

    def record_loop_trace(self, trace_id: str, workflow_name: str | None = None, group_id: str | None = None) -> None:
        self._loop.run(self._handle.record_loop_trace(trace_id, workflow_name, group_id))

    def interruptions(self) -> list[TaskEvent]:
        return self._loop.run(self._handle.interruptions())

    def ledger(self) -> Ledger:
        return self._loop.run(self._handle.ledger())
