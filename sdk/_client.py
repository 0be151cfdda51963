"""The Berth API client: register agents, submit tasks, follow and steer them.

    async with Client("http://127.0.0.1:8080") as client:
        await client.register(agent)
        task = await client.submit(agent, "summarise the report", budget=Budget(tokens=20_000))
        print(await task.result())

`Client` is async-first. `SyncClient` (in `_sync.py`) is this client run to completion, for scripts.
Every refusal from the server arrives as a typed exception from `sdk._errors` carrying the
server's message and the offending field.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncGenerator, Mapping
from typing import Any, Protocol
from urllib.parse import quote

import httpx
from pydantic import BaseModel, ValidationError

from . import _registering as registering
from ._budget import Budget
from ._errors import (
    BerthError,
    BudgetExhausted,
    Conflict,
    Forbidden,
    InvalidSpec,
    NotFound,
    TaskCancelled,
    TaskFailed,
    Unauthorized,
)
from ._settings import ModelSettings
from ._spec import AgentSpec, TaskSpec
from ._state import Spend, TaskEvent, TaskState, TaskStatus
from ._stream import StreamEvent, TextReset, TokenDelta, Writing, typed
from .secret_settings import secret_setting
from .wire.catalogue import CatalogueModel, ModelEntry, PrewarmRequest, PrewarmStarted, ScalingPolicy
from .wire.contracts import SpawnedChild
from .wire.events import END_EVENT, REVOKED_EVENT, TOKEN_DELTA_EVENT, TOKEN_RESET_EVENT, SseParser
from .wire.fleet import DEFAULT_ADMIT_TTL_S, NodeAdmission, NodeRevocation, NodeView, PreemptRequest, ReplicaView
from .wire.identity import (
    API_KEY_ENV,
    ApiKeyView,
    AuditEntry,
    CreatedKey,
    KeyRequest,
    Role,
    Tenant,
    TenantSpec,
    TenantUpdate,
)
from .wire.lease import ServiceClass
from .wire.loop_approvals import ApprovalRequest, LoopApprovals
from .wire.node_pools import DEFAULT_POOL_MAX_NODES, DEFAULT_POOL_TOKEN_TTL_S, PoolToken, PoolTokenView
from .wire.objectives import LatencyObjectives
from .wire.output import answer_json
from .wire.resources import CheckpointDetail, CheckpointSummary, ErrorBody, ForkRequest, Ledger

# An idle connection is dropped before the server's keep-alive (uvicorn's 5 s) closes it: at httpx's default, also
# 5 s, a request sent as the server closed the connection failed with "server disconnected" and never ran.
KEEPALIVE_S = 2.0
DEFAULT_API_URL = "http://127.0.0.1:8080"
API_URL_ENV = "BERTH_API_URL"

# The server pings an idle event stream every 15 s; four missed pings mean the connection is
# dead even if TCP has not noticed, so the client reconnects.
EVENT_STREAM_READ_TIMEOUT_S = 60.0
# Reconnect backoff 0.25, 0.5, 1, 2, 4, 5, 5 ... s; this many cuts in a row without a single
# event in between means the server is gone, not blinking.
# How long `TaskHandle.result` keeps asking while the API does not answer (a server restart takes seconds).
API_RESTART_WAIT_S = 60.0
EVENT_STREAM_MAX_RECONNECTS = 8

_STATUS_ERRORS: dict[int, type[BerthError]] = {
    400: InvalidSpec,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: InvalidSpec,
    422: InvalidSpec,
}


class ApiUnreachable(BerthError):
    """The API could not be reached at all (connection refused, DNS, timeout)."""


class _HasSpec(Protocol):
    def spec(self) -> AgentSpec: ...


class _HasName(Protocol):
    @property
    def name(self) -> str: ...


def error_from_response(response: httpx.Response) -> BerthError:
    """The typed exception for an error response, with the server's message and field."""
    message, field = None, None
    try:
        detail = ErrorBody.model_validate(response.json()).error
        message, field = detail.message, detail.field
    except (ValueError, ValidationError):
        message = response.text[:500] or response.reason_phrase
    cls = _STATUS_ERRORS.get(response.status_code, BerthError)
    return cls(message or f"HTTP {response.status_code}", field=field, status_code=response.status_code)


def outcome(state: TaskState) -> str:
    """The result of a final task, or the exception that says how it ended without one."""
    reason = state.error or state.status.value
    if state.status == TaskStatus.completed:
        return state.result or ""
    if state.status == TaskStatus.out_of_budget:
        raise BudgetExhausted(f"task {state.task_id} ran out of budget: {reason}", state=state)
    if state.status == TaskStatus.cancelled:
        raise TaskCancelled(f"task {state.task_id} was cancelled: {reason}", state=state)
    if state.status in (TaskStatus.failed, TaskStatus.max_steps):
        raise TaskFailed(f"task {state.task_id} ended {state.status.value}: {reason}", state=state)
    raise BerthError(f"task {state.task_id} has not finished (status {state.status.value})")


def as_budget(value: Budget | int | None) -> Budget | None:
    """A Budget from a Budget or a plain token count; a bad count is InvalidSpec on budget.tokens."""
    if value is None or isinstance(value, Budget):
        return value
    return Budget(tokens=value)  # a bad count is refused there, naming budget.tokens


def _path(*parts: str) -> str:
    return "/" + "/".join(quote(p, safe="") for p in parts)


class Client:
    """An async client of the Berth HTTP API.

    Args:
        url: the API's base URL (`berth server` listens on http://127.0.0.1:8080 by default).
        api_key: sent as `Authorization: Bearer <key>`; when not given, BERTH_API_KEY from the environment, or the
            content of the file BERTH_API_KEY_FILE names (so a tool worker or script started with the key in its
            environment, or a Secret mounted as a file, needs no code for it). Both at once, or a file that cannot
            be read or is empty, raise SecretSettingRefused.
        timeout: seconds for each request (event streams wait longer between messages).
        transport: an httpx transport to use instead of the network, e.g.
            `httpx.ASGITransport(app)` to talk to an app in the same process.
    """

    def __init__(
        self,
        url: str | None = None,
        api_key: str | None = None,
        timeout: float = 30,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        headers = {"user-agent": "berth-sdk"}
        api_key = api_key or secret_setting(API_KEY_ENV)
        if api_key:
            headers["authorization"] = f"Bearer {api_key}"
        # Unset: BERTH_API_URL, as the CLI reads it, else `berth up`'s local API.
        self.url = (url or os.environ.get(API_URL_ENV) or DEFAULT_API_URL).rstrip("/")
        self.timeout = timeout
        # Kept for clients that speak another wire format to the same API (sdk.openai_agents' OpenAI client).
        self._api_key, self._transport = api_key, transport
        self._http = httpx.AsyncClient(
            base_url=self.url,
            headers=headers,
            timeout=timeout,
            transport=transport,
            limits=httpx.Limits(keepalive_expiry=KEEPALIVE_S),
        )

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    # -- agents -------------------------------------------------------------------------

    async def register(self, agent: AgentSpec | _HasSpec) -> AgentSpec:
        """Register an agent (an `AgentSpec`, or an `Agent` whose `.spec()` gives one); returns it versioned."""
        spec = agent if isinstance(agent, AgentSpec) else agent.spec()
        body = await self._request("POST", "/v1/agents", json=spec.model_dump(mode="json"))
        return AgentSpec.model_validate(body)

    async def agents(self) -> list[AgentSpec]:
        return [AgentSpec.model_validate(a) for a in await self._request("GET", "/v1/agents")]

    async def agent(self, name: str) -> AgentSpec:
        return AgentSpec.model_validate(await self._request("GET", _path("v1", "agents", name)))

    # -- models -------------------------------------------------------------------------

    async def models(self) -> list[CatalogueModel]:
        return [CatalogueModel.model_validate(m) for m in await self._request("GET", "/v1/models")]

    async def model(self, name: str) -> CatalogueModel:
        return CatalogueModel.model_validate(await self._request("GET", f"/v1/models/{quote(name)}"))

    async def put_model(self, entry: ModelEntry) -> CatalogueModel:
        """Add a model to the catalogue or replace its entry (its scaling policy is kept)."""
        body = entry.model_dump(mode="json")
        return CatalogueModel.model_validate(await self._request("PUT", f"/v1/models/{quote(entry.name)}", json=body))

    async def set_policy(self, name: str, policy: ScalingPolicy) -> CatalogueModel:
        body = policy.model_dump(mode="json")
        return CatalogueModel.model_validate(await self._request("PUT", f"/v1/models/{quote(name)}/policy", json=body))

    async def prewarm(self, model: str, datacenter: str | None = None) -> PrewarmStarted:
        """Start putting `model`'s weights on the disks of the nodes that could serve it (one datacenter's, or all)."""
        body = PrewarmRequest(datacenter=datacenter).model_dump(mode="json")
        return PrewarmStarted.model_validate(
            await self._request("POST", f"/v1/models/{quote(model)}/prewarm", json=body)
        )

    # -- fleet --------------------------------------------------------------------------

    async def nodes(self, status: str | None = None, datacenter: str | None = None) -> list[NodeView]:
        """The GPU nodes that joined the fleet, by id (optionally one status or one datacenter)."""
        params = {k: v for k, v in (("status", status), ("datacenter", datacenter)) if v is not None}
        return [NodeView.model_validate(n) for n in await self._request("GET", "/v1/nodes", params=params)]

    async def node(self, node_id: str) -> NodeView:
        return NodeView.model_validate(await self._request("GET", _path("v1", "nodes", node_id)))

    async def drain(self, node_id: str) -> NodeView:
        """Stop placing new work on a node; what it runs finishes."""
        return NodeView.model_validate(await self._request("POST", _path("v1", "nodes", node_id, "drain")))

    async def preempt_node(self, node_id: str, notice_s: float = 30.0) -> NodeView:
        """Take a node away as a spot reclaim would; its tasks resume elsewhere from their checkpoints."""
        body = PreemptRequest(notice_s=notice_s).model_dump(mode="json")
        return NodeView.model_validate(await self._request("POST", _path("v1", "nodes", node_id, "preempt"), json=body))

    async def undrain(self, node_id: str) -> NodeView:
        return NodeView.model_validate(await self._request("POST", _path("v1", "nodes", node_id, "undrain")))

    async def admit_node(self, node_id: str, ttl_s: int = DEFAULT_ADMIT_TTL_S) -> NodeAdmission:
        """A per-node join token: `node_id` may join with it once, admitted at once, within `ttl_s`."""
        body = {"ttl_s": ttl_s}  # the server bounds it, and names the field when it refuses
        return NodeAdmission.model_validate(
            await self._request("POST", _path("v1", "nodes", node_id, "admit"), json=body)
        )

    async def approve_node(self, node_id: str) -> NodeView:
        """Let a node that joined with the cluster token (and waits, `pending`) into the fleet."""
        return NodeView.model_validate(await self._request("POST", _path("v1", "nodes", node_id, "approve")))

    async def set_node_trust(self, node_id: str, dedicated: str | None) -> NodeView:
        """Dedicate a node to one tenant (None: to none), replacing what was set before: only an operator's word on
        this is read, never a label the node registers itself."""
        body = {"dedicated": dedicated}
        return NodeView.model_validate(await self._request("PUT", _path("v1", "nodes", node_id, "trust"), json=body))

    async def revoke_node(self, node_id: str) -> NodeRevocation:
        """Kill a node's credential now; the steps it runs move elsewhere. It must be admitted again to return."""
        return NodeRevocation.model_validate(await self._request("POST", _path("v1", "nodes", node_id, "revoke")))

    async def remove_node(self, node_id: str) -> NodeRevocation:
        """Revoke a node and forget it, so its id may be admitted anew."""
        return NodeRevocation.model_validate(await self._request("DELETE", _path("v1", "nodes", node_id)))

    async def create_pool_token(
        self,
        pool: str,
        max_nodes: int = DEFAULT_POOL_MAX_NODES,
        ttl_s: int = DEFAULT_POOL_TOKEN_TTL_S,
        dedicated: str | None = None,
    ) -> PoolToken:
        """A pool token: the nodes that join with it are admitted at once into `pool` (at most `max_nodes` in the
        fleet at once, within `ttl_s`), dedicated to a tenant if one is named. Its secret is shown only here."""
        body = {"max_nodes": max_nodes, "ttl_s": ttl_s, "trust": {"dedicated": dedicated}}  # bounded by the server
        return PoolToken.model_validate(
            await self._request("POST", _path("v1", "node-pools", pool, "tokens"), json=body)
        )

    async def pool_tokens(self, pool: str | None = None) -> list[PoolTokenView]:
        params = {"pool": pool} if pool is not None else None
        return [
            PoolTokenView.model_validate(t) for t in await self._request("GET", "/v1/node-pools/tokens", params=params)
        ]

    async def revoke_pool_token(self, token_id: str) -> PoolTokenView:
        """No node joins with the token any more; the nodes that joined stay, each revocable alone."""
        return PoolTokenView.model_validate(
            await self._request("POST", _path("v1", "node-pools", "tokens", token_id, "revoke"))
        )

    async def replicas(self, model: str | None = None) -> list[ReplicaView]:
        params = {"model": model} if model is not None else None
        return [ReplicaView.model_validate(r) for r in await self._request("GET", "/v1/replicas", params=params)]

    # -- tasks --------------------------------------------------------------------------

    async def submit(
        self,
        agent: str | _HasName,
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
    ) -> TaskHandle:
        """Submit a task and return its handle at once (the task runs on the server).

        `budget` is a `Budget` or a plain token count; `settings` override the agent's model settings field by
        field (a setting the model's engine or provider cannot apply is refused, naming it); `objectives` set
        this task's latency objectives over its agent's, its tenant's and its class's defaults, field by field
        (the task's state shows what they came to). Resubmitting the same `task_id` with
        the same spec returns the existing task; with another spec it raises `Conflict`.
        Without `tenant`, the server settles it from the key: a key confined to a tenant
        submits for it, any other for "default".
        """
        name = agent if isinstance(agent, str) else agent.name
        try:
            spec = TaskSpec(
                task_id=task_id,
                agent=name,
                input=input,
                budget=as_budget(budget),
                tenant=tenant or "default",
                priority=priority,
                model=model,
                max_steps=max_steps,
                budget_grace_s=budget_grace_s,
                service_class=service_class,
                settings=settings,
                objectives=objectives,
            )
        except ValidationError as exc:
            raise InvalidSpec.from_validation(exc) from None
        body = spec.model_dump(mode="json", exclude_none=True, exclude=None if tenant else {"tenant"})
        try:
            body = await self._request("POST", "/v1/tasks", json=body)
        except InvalidSpec as refused:
            # serve() in this process may be registering the agent right now: once it has, ask again.
            if refused.field != "agent" or not await asyncio.to_thread(registering.wait, name):
                raise
            body = await self._request("POST", "/v1/tasks", json=body)
        return TaskHandle(self, TaskState.model_validate(body).task_id, getattr(agent, "output_type", None))

    def task(self, task_id: str, output_type: type[BaseModel] | None = None) -> TaskHandle:
        """A handle on an existing task (no request is made until you use it); with `output_type`, its
        `result()` is that model, validated from the answer."""
        return TaskHandle(self, task_id, output_type)

    async def tasks(
        self,
        status: TaskStatus | str | None = None,
        agent: str | None = None,
        limit: int = 100,
        *,
        tenant: str | None = None,
        parent: str | None = None,
        offset: int = 0,
    ) -> list[TaskState]:
        params = {
            "status": status.value if isinstance(status, TaskStatus) else status,
            "agent": agent,
            "tenant": tenant,
            "parent": parent,
            "limit": limit,
            "offset": offset,
        }
        body = await self._request("GET", "/v1/tasks", params={k: v for k, v in params.items() if v is not None})
        return [TaskState.model_validate(s) for s in body]

    # -- plumbing -----------------------------------------------------------------------

    # -- identity (admin keys) ----------------------------------------------------------

    async def create_key(
        self, role: Role | str, tenant: str | None = None, name: str = "", description: str = ""
    ) -> CreatedKey:
        """A new API key; its `.key` (the secret) is in this answer only."""
        try:
            body = KeyRequest(role=Role(role), tenant=tenant, name=name, description=description)
        except ValueError as exc:
            raise InvalidSpec(
                f"unknown role {role!r}; one of {', '.join(r.value for r in Role)}", field="role"
            ) from exc
        return CreatedKey.model_validate(await self._request("POST", "/v1/keys", json=body.model_dump(mode="json")))

    async def keys(self) -> list[ApiKeyView]:
        return [ApiKeyView.model_validate(k) for k in await self._request("GET", "/v1/keys")]

    async def revoke_key(self, key_id: str) -> ApiKeyView:
        return ApiKeyView.model_validate(await self._request("POST", _path("v1", "keys", key_id, "revoke")))

    async def create_tenant(self, spec: TenantSpec) -> Tenant:
        return Tenant.model_validate(await self._request("POST", "/v1/tenants", json=spec.model_dump(mode="json")))

    async def tenants(self) -> list[Tenant]:
        return [Tenant.model_validate(t) for t in await self._request("GET", "/v1/tenants")]

    async def tenant(self, name: str) -> Tenant:
        return Tenant.model_validate(await self._request("GET", _path("v1", "tenants", name)))

    async def update_tenant(self, name: str, change: TenantUpdate) -> Tenant:
        """Change the fields `change` sets (an explicit None clears a limit)."""
        body = change.model_dump(mode="json", exclude_unset=True)
        return Tenant.model_validate(await self._request("PATCH", _path("v1", "tenants", name), json=body))

    async def audit(self, key_id: str | None = None, limit: int = 100) -> list[AuditEntry]:
        """State-changing requests, newest first."""
        params: dict[str, Any] = {"limit": limit, **({"key_id": key_id} if key_id else {})}
        return [AuditEntry.model_validate(a) for a in await self._request("GET", "/v1/audit", params=params)]

    async def _request(
        self, method: str, path: str, *, json: Any = None, params: Mapping[str, Any] | None = None
    ) -> Any:
        try:
            response = await self._http.request(method, path, json=json, params=params)
        except httpx.TransportError as exc:
            raise ApiUnreachable(f"cannot reach the Berth API at {self.url}: {str(exc) or type(exc).__name__}") from exc
        if response.status_code >= 400:
            raise error_from_response(response)
        return response.json() if response.content else None

    async def _stream_events(
        self, task_id: str, after: int, deltas: bool = False
    ) -> AsyncGenerator[TaskEvent | TokenDelta | TextReset, None]:
        """Follow a task's events from `after` (with `deltas`, its answers' text as it is written too),
        reconnecting with Last-Event-ID when cut."""
        cuts = 0
        timeout = httpx.Timeout(self.timeout, read=max(EVENT_STREAM_READ_TIMEOUT_S, self.timeout))
        while True:
            headers = {"last-event-id": str(after)} if after else {}
            try:
                async with self._http.stream(
                    "GET",
                    _path("v1", "tasks", task_id, "events"),
                    params={"after": after, **({"deltas": "true"} if deltas else {})},
                    headers=headers,
                    timeout=timeout,
                ) as response:
                    if response.status_code >= 400:
                        await response.aread()
                        raise error_from_response(response)
                    parser = SseParser()
                    async for line in response.aiter_lines():
                        message = parser.feed(line)
                        if message is None:
                            continue
                        if message.event == END_EVENT:
                            return
                        if message.event == REVOKED_EVENT:
                            raise Unauthorized(
                                "the API key was revoked while following the task's events",
                                field="authorization",
                                status_code=401,
                            )
                        if message.event == TOKEN_DELTA_EVENT:
                            yield TokenDelta.model_validate_json(message.data)
                            continue
                        if message.event == TOKEN_RESET_EVENT:
                            yield TextReset.model_validate_json(message.data)
                            continue
                        event = TaskEvent.model_validate_json(message.data)
                        after, cuts = event.seq, 0
                        yield event
                error: BaseException | None = None
            except httpx.TransportError as exc:
                error = exc
            # The stream closed without the end marker: the connection was cut (proxy, restart).
            cuts += 1
            if cuts > EVENT_STREAM_MAX_RECONNECTS:
                raise ApiUnreachable(f"lost the event stream of task {task_id} at {self.url}: {error}")
            await asyncio.sleep(min(0.25 * 2 ** (cuts - 1), 5.0))


class TaskHandle:
    """One task on the server; every method makes a request (nothing is cached)."""

    def __init__(self, client: Client, task_id: str, output_type: type[BaseModel] | None = None) -> None:
        self._client = client
        self.task_id = task_id
        self.output_type = output_type  # submitted with an Agent that has one: result() returns it typed

    def __repr__(self) -> str:
        return f"TaskHandle({self.task_id!r})"

    async def status(self) -> TaskState:
        return TaskState.model_validate(await self._client._request("GET", self._path()))

    async def result(self, timeout: float | None = None) -> Any:
        """Wait until the task is final and return its result: the answer's text, or with an `output_type` (the
        agent's, when it was submitted with the Agent) that model, validated from the answer.

        Waits on the event stream (no polling). Raises `BudgetExhausted` (out_of_budget),
        `TaskFailed` (failed, max_steps) or `TaskCancelled`, each carrying the final state,
        and `TimeoutError` when `timeout` seconds pass first.
        """
        async with asyncio.timeout(timeout):
            state = await self._status_across_restarts()
            after = 0
            while not state.status.is_final:
                try:
                    async for event in self.events(after=after):
                        after = event.seq
                except ApiUnreachable:
                    pass  # the API is restarting: the task runs on regardless; ask again below
                state = await self._status_across_restarts()
                if not state.status.is_final:
                    # The stream only ends on a final task, so the store and the live state
                    # disagree for a moment; look again shortly rather than spin.
                    await asyncio.sleep(0.5)
        text = outcome(state)
        return text if self.output_type is None else self.output_type.model_validate_json(answer_json(text))

    async def _status_across_restarts(self) -> TaskState:
        """`status`, retried while the API is unreachable for up to API_RESTART_WAIT_S: a task outlives
        a restart of the server, and so should a caller waiting for its result."""
        deadline = asyncio.get_running_loop().time() + API_RESTART_WAIT_S
        pause = 0.25
        while True:
            try:
                return await self.status()
            except ApiUnreachable:
                if asyncio.get_running_loop().time() >= deadline:
                    raise
                await asyncio.sleep(pause)
                pause = min(pause * 2, 2.0)

    def events(self, after: int = 0) -> AsyncGenerator[TaskEvent, None]:
        """The task's events with `seq > after`, live, until the task is final and drained."""
        return self._client._stream_events(self.task_id, after)  # type: ignore[return-value]  # no deltas asked

    async def stream(self, after: int = 0) -> AsyncGenerator[StreamEvent | TokenDelta | TextReset, None]:
        """The task as it happens, typed: `TokenDelta`s of the answer as the engine writes it (and a `TextReset`
        where a step taken over after a cut wrote otherwise: see sdk/_stream.py), and its stored events as
        `StateChanged`, `BudgetWaiting`, `StepFinished`, `ModelCalled`, `Interrupted` and finally `Ended`; until
        the task is final. A step's deltas add up to its stored text before its `StepFinished`."""
        async for event in self._client._stream_events(self.task_id, after, deltas=True):
            yield event if isinstance(event, (TokenDelta, TextReset)) else typed(event)

    async def writing(self) -> Writing:
        """What the running step has written so far, whole (empty when no step generates): `stream()` gives it
        as deltas; this is for a caller that looks now and then."""
        return Writing.model_validate(await self._client._request("GET", self._path("writing")))

    async def cancel(self, reason: str = "cancelled by request") -> TaskState:
        body = await self._client._request("POST", self._path("cancel"), json={"reason": reason})
        return TaskState.model_validate(body)

    async def simulate_preemption(self) -> TaskState:
        """Cut the task's running (or next) model call off as if its node were lost; it resumes elsewhere.

        For checking that an agent's tools are idempotent under preemption (finished tool calls never
        run again; a call in flight is retried with the same idempotency key). Needs a fleet.
        """
        return TaskState.model_validate(await self._client._request("POST", self._path("simulate-preemption")))

    async def raise_budget(self, tokens: int, usd: float = 0.0) -> Spend:
        """Add tokens (and dollars) to the budget; a task in awaiting_budget resumes."""
        body = await self._client._request("POST", self._path("raise-budget"), json={"tokens": tokens, "usd": usd})
        return Spend.model_validate(body)

    async def spawn(self, agent: str, input: str, tokens: int | None = None) -> TaskHandle:
        """Start a sub-agent paid from this task's budget (`tokens`, or half of what remains)."""
        body: dict[str, object] = {"agent": agent, "input": input}
        if tokens is not None:
            body["tokens"] = tokens
        child = SpawnedChild.model_validate(await self._client._request("POST", self._path("spawn"), json=body))
        return self._client.task(child.task_id)

    async def token(self) -> str:
        """A task token: an API key for this task's own tools and MCP servers. Whatever it submits is a
        sub-agent paid from this task's budget, it sees only this task and its sub-agents, and it stops
        working when the task ends. Pass it on, never log it."""
        return CreatedKey.model_validate(await self._client._request("POST", self._path("token"))).key

    async def answer(self, text: str) -> TaskState:
        """Answer the question of a task in awaiting_input (`Conflict` otherwise)."""
        return TaskState.model_validate(await self._client._request("POST", self._path("answer"), json={"text": text}))

    async def approve(self, call_id: str | None = None) -> TaskState:
        """Approve the tool call `call_id` of the task's own loop that waits for a person (every waiting call,
        without one): the tool runs when the loop resumes. `state.approvals` lists the waiting calls."""
        body = {"call_id": call_id} if call_id is not None else {}
        return TaskState.model_validate(await self._client._request("POST", self._path("approve"), json=body))

    async def reject(self, reason: str | None = None, call_id: str | None = None) -> TaskState:
        """Reject the waiting tool call `call_id` (every waiting call, without one): the tool does not run and the
        model is told it was not approved (`reason`, when given, is what it is told)."""
        body = {k: v for k, v in (("reason", reason), ("call_id", call_id)) if v is not None}
        return TaskState.model_validate(await self._client._request("POST", self._path("reject"), json=body))

    async def approvals(self) -> LoopApprovals | None:
        """The tool calls the task's own loop last stopped at for approval, the decisions on them so far and the
        loop's state then (None when it never stopped for one)."""
        try:
            body = await self._client._request("GET", self._path("approvals"))
        except NotFound as missing:
            if missing.field == "approvals":
                return None
            raise
        return LoopApprovals.model_validate(body)

    async def ask_approval(self, request: ApprovalRequest) -> LoopApprovals:
        """For a loop: hold these tool calls for a person's word (the task waits awaiting_input) with the loop's
        state. The same calls again answer with what is held (a re-run after a crash)."""
        body = await self._client._request("POST", self._path("approvals"), json=request.model_dump(mode="json"))
        return LoopApprovals.model_validate(body)

    async def record_loop_trace(
        self, trace_id: str, workflow_name: str | None = None, group_id: str | None = None
    ) -> None:
        """For a loop: record the trace of this run of it (an Agents SDK trace id) as the task's `loop_trace`
        event, so that whoever reads the task finds the run's trace."""
        body = {
            k: v for k, v in (("trace_id", trace_id), ("workflow_name", workflow_name), ("group_id", group_id)) if v
        }
        await self._client._request("POST", self._path("loop-trace"), json=body)

    async def checkpoints(self) -> list[CheckpointSummary]:
        return [
            CheckpointSummary.model_validate(c) for c in await self._client._request("GET", self._path("checkpoints"))
        ]

    async def checkpoint(self, seq: int) -> CheckpointDetail:
        return CheckpointDetail.model_validate(await self._client._request("GET", self._path("checkpoints", str(seq))))

    async def fork(
        self,
        checkpoint_seq: int,
        budget: Budget | int | None = None,
        model: str | None = None,
        task_id: str | None = None,
        max_steps: int | None = None,
        input: str | None = None,
    ) -> TaskHandle:
        """Start a new task from one of this task's checkpoints; returns the new task's handle."""
        try:
            request = ForkRequest(
                checkpoint_seq=checkpoint_seq,
                task_id=task_id,
                budget=as_budget(budget),
                model=model,
                max_steps=max_steps,
                input=input,
            )
        except ValidationError as exc:
            raise InvalidSpec.from_validation(exc) from None
        body = await self._client._request(
            "POST", self._path("fork"), json=request.model_dump(mode="json", exclude_none=True)
        )
        return TaskHandle(self._client, TaskState.model_validate(body).task_id, self.output_type)

    # -- a task whose loop is the author's own (sdk.openai_agents) ------------------------

    @property
    def openai_base_url(self) -> str:
        """Where an OpenAI client sends this task's model calls (`<base>/chat/completions`): each one a step
        of the task, under its budget, on the pool. Only a task whose agent has loop="own" takes them."""
        return f"{self._client.url}{self._path()}"

    async def kept_tool_result(self, call_id: str) -> str | None:
        """What the loop's tool returned for the model's call `call_id`, if the loop reported it before."""
        try:
            body = await self._client._request("GET", self._path("tool-results", call_id))
        except NotFound as missing:
            if missing.field == "call_id":
                return None
            raise
        return str(body["content"])

    async def keep_tool_result(self, call_id: str, content: str) -> None:
        """Report a tool's result, so that the loop re-run after a crash reads it back instead of running the
        tool again (the first report for a call stands)."""
        await self._client._request("PUT", self._path("tool-results", call_id), json={"content": content})

    async def finish(self, output: str | None = None, error: str | None = None) -> TaskState:
        """End the task of an own loop: completed with its `output`, or failed with `error`."""
        body = {k: v for k, v in (("output", output), ("error", error)) if v is not None}
        return TaskState.model_validate(await self._client._request("POST", self._path("finish"), json=body))

    async def interruptions(self) -> list[TaskEvent]:
        """Each node loss or preemption the task rode out: node, kind, tokens kept and lost, where it resumed."""
        return [TaskEvent.model_validate(e) for e in await self._client._request("GET", self._path("interruptions"))]

    async def ledger(self) -> Ledger:
        return Ledger.model_validate(await self._client._request("GET", self._path("ledger")))

    def _path(self, *rest: str) -> str:
        return _path("v1", "tasks", self.task_id, *rest)
