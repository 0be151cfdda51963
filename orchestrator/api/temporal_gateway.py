"""The API's one door to Temporal: start a task's workflow, query it, update it, signal it.

The server must start (and answer /healthz, list tasks, read checkpoints) while Temporal
is down or still starting under `berth up`, so the gateway connects on first use and tries
again on the next call after a failure, instead of failing at startup. Temporal's errors
become three domain errors the routes can answer precisely:

- `TemporalUnavailable`: the frontend cannot be reached, or the workflow did not answer in
  time (no worker polling) -> 503;
- `WorkflowGone`: the task's workflow is not running (finished, or never started) -> 409;
- `UpdateRejected`: the workflow refused the update (e.g. an answer while not awaiting input) -> 409.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from typing import Any, TypeVar, overload

from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
from temporalio.client import (
    Client,
    RPCTimeoutOrCancelledError,
    WorkflowQueryFailedError,
    WorkflowQueryRejectedError,
    WorkflowUpdateFailedError,
)
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import RPCError, RPCStatusCode

from sdk import Spend, TaskState
from sdk.wire.builtins import SpawnAgentArgs
from sdk.wire.contracts import (
    ANSWER_UPDATE,
    CANCEL_SIGNAL,
    CONTROL_TASK_QUEUE,
    GENERATE_ACTIVITY,
    NODE_GONE_SIGNAL,
    RAISE_BUDGET_UPDATE,
    RAISE_CHILD_BUDGET_UPDATE,
    SIMULATE_PREEMPTION_SIGNAL,
    SPAWN_UPDATE,
    STATE_QUERY,
    WORKFLOW_NAME,
    CancelRequest,
    GenerationProgress,
    HumanAnswer,
    NodeGone,
    RaiseBudget,
    RaiseChildBudget,
    SpawnedChild,
)
from sdk.wire.loop_approvals import (
    LOOP_APPROVALS_QUERY,
    LOOP_ASK_APPROVAL_UPDATE,
    LOOP_DECIDE_UPDATE,
    ApprovalDecision,
    ApprovalRequest,
    LoopApprovals,
)
from sdk.wire.own_loop import (
    LOOP_ASKED_QUERY,
    LOOP_CALL_UPDATE,
    LOOP_FINISH_UPDATE,
    LOOP_TOOL_RESULT_QUERY,
    LOOP_TOOL_RESULT_UPDATE,
    LOOP_TRANSCRIPT_QUERY,
    LoopCall,
    LoopFinish,
    LoopReply,
    LoopToolResult,
    LoopTranscript,
)
from sdk.wire.task_run import TaskRun

from ..telemetry.tracing import tracing_interceptor

log = logging.getLogger("berth.api.temporal")
_R = TypeVar("_R")  # what an update answers

CONNECT_TIMEOUT_S = 5.0
# A query is answered by a worker; a live state that takes longer than this is worth less
# than the stored one, which the workflow writes on every change anyway.
QUERY_TIMEOUT_S = 2.0
# An update waits for a worker to run the handler; long enough for a busy worker, short
# enough that a caller without any worker hears about it.
UPDATE_TIMEOUT_S = 15.0
HEALTH_TIMEOUT_S = 3.0
# A start is one write on the frontend, but a burst of submits (a thousand at once on a 2-core
# machine) queues the writes behind each other for longer than a connect; a start is idempotent,
# so waiting costs the caller less than a refusal that asks them to send it again.
START_TIMEOUT_S = 30.0
# An own loop's model call is a whole step: a queue for the GPU, perhaps a cold load of the model, the generation.
LOOP_CALL_TIMEOUT = timedelta(minutes=30)


class TemporalUnavailable(Exception):
    """Temporal (or a worker behind it) did not answer."""


class WorkflowGone(Exception):
    """The task's workflow is not running: it finished, or it was never started."""


class UpdateRejected(Exception):
    """The workflow's validator or handler refused the update; the message says why, `kind` what sort it is
    (the handler's ApplicationError type: OutOfBudget, TranscriptMoved, …)."""

    def __init__(self, message: str, kind: str | None = None) -> None:
        super().__init__(message)
        self.kind = kind


class TemporalGateway:
    """Starts and steers AgentTaskWorkflow runs by name, through a lazily connected client."""

    def __init__(
        self,
        address: str,
        namespace: str = "default",
        *,
        client: Client | None = None,
        task_queue: str = CONTROL_TASK_QUEUE,
        query_timeout_s: float = QUERY_TIMEOUT_S,
        update_timeout_s: float = UPDATE_TIMEOUT_S,
        credentials: dict[str, Any] | None = None,
    ) -> None:
        self.address = address
        self.namespace = namespace
        # `tls` and `api_key` of Client.connect (orchestrator.temporal.temporal_connect_options): read and checked
        # before the gateway is made, so a bad setting stops the server at start rather than at its first call.
        self._credentials = dict(credentials or {})
        self.task_queue = task_queue
        self.query_timeout = timedelta(seconds=query_timeout_s)
        self.update_timeout = timedelta(seconds=update_timeout_s)
        self._client = client
        self._lock: asyncio.Lock | None = None

    @classmethod
    async def connect(
        cls, address: str, namespace: str = "default", *, credentials: dict[str, Any] | None = None
    ) -> TemporalGateway:
        """A gateway that has tried to connect once; it never raises, a later call retries."""
        gateway = cls(address, namespace, credentials=credentials)
        try:
            await gateway.client()
        except TemporalUnavailable as exc:
            log.warning("Temporal is not reachable yet (%s); will retry on first use", exc)
        return gateway

    @classmethod
    def from_client(cls, client: Client, task_queue: str = CONTROL_TASK_QUEUE) -> TemporalGateway:
        """Wrap a connected client; it must use `pydantic_data_converter`."""
        return cls(client.service_client.config.target_host, client.namespace, client=client, task_queue=task_queue)

    async def client(self) -> Client:
        if self._client is not None:
            return self._client
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._client is None:
                try:
                    self._client = await asyncio.wait_for(
                        Client.connect(
                            self.address,
                            namespace=self.namespace,
                            data_converter=pydantic_data_converter,
                            interceptors=[tracing_interceptor()],
                            **self._credentials,
                        ),
                        CONNECT_TIMEOUT_S,
                    )
                except (TimeoutError, RuntimeError, OSError, RPCError) as exc:
                    raise TemporalUnavailable(f"Temporal at {self.address} is unreachable: {exc}") from exc
        return self._client

    async def check(self) -> None:
        """Raise TemporalUnavailable unless the frontend answers for our namespace."""
        client = await self.client()
        try:
            await client.workflow_service.describe_namespace(
                DescribeNamespaceRequest(namespace=self.namespace), timeout=timedelta(seconds=HEALTH_TIMEOUT_S)
            )
        except (RPCError, RuntimeError) as exc:
            raise TemporalUnavailable(f"Temporal at {self.address} did not answer: {exc}") from exc

    async def start_task(self, run: TaskRun) -> None:
        """Start the task's workflow; starting one that already runs is a no-op (idempotent submit)."""
        client = await self.client()
        try:
            await client.start_workflow(
                WORKFLOW_NAME,
                run,
                id=run.task_id,
                task_queue=self.task_queue,
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                rpc_timeout=timedelta(seconds=START_TIMEOUT_S),
            )
        except (RPCError, RuntimeError) as exc:
            raise TemporalUnavailable(f"could not start the workflow of task {run.task_id}: {exc}") from exc

    async def is_started(self, task_id: str) -> bool:
        """Whether the task's workflow exists: a start whose answer timed out may have gone through."""
        client = await self.client()
        try:
            await client.get_workflow_handle(task_id).describe(rpc_timeout=timedelta(seconds=START_TIMEOUT_S))
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                return False
            raise TemporalUnavailable(f"could not tell whether task {task_id} started: {exc.message}") from exc
        return True

    async def query_state(self, task_id: str) -> TaskState | None:
        """The workflow's live state, or None when it cannot answer right now (best effort)."""
        try:
            client = await self.client()
            handle = client.get_workflow_handle(task_id)
            return await handle.query(STATE_QUERY, result_type=TaskState, rpc_timeout=self.query_timeout)
        except (
            TemporalUnavailable,
            RPCError,
            RuntimeError,
            WorkflowQueryFailedError,
            WorkflowQueryRejectedError,
            RPCTimeoutOrCancelledError,
        ) as exc:
            log.debug("state query of %s failed: %s", task_id, exc)
            return None

    async def writing(self, task_id: str) -> GenerationProgress | None:
        """What the task's running generation has written so far, from its last heartbeat (best effort: None
        when no generation runs, or Temporal cannot say right now). Heartbeats are not history: reading them
        puts nothing in the workflow's."""
        try:
            client = await self.client()
            described = await client.get_workflow_handle(task_id).describe(rpc_timeout=self.query_timeout)
            for pending in described.raw_description.pending_activities:
                if pending.activity_type.name == GENERATE_ACTIVITY and pending.heartbeat_details.payloads:
                    details = await client.data_converter.decode(
                        pending.heartbeat_details.payloads, [GenerationProgress]
                    )
                    return details[0] if details else None
        except (TemporalUnavailable, RPCError, RuntimeError, RPCTimeoutOrCancelledError, ValueError) as exc:
            log.debug("reading what %s writes failed: %s", task_id, exc)
        return None

    async def raise_budget(self, task_id: str, request: RaiseBudget) -> Spend:
        return await self._update(task_id, RAISE_BUDGET_UPDATE, request, Spend)

    async def raise_child(self, parent_task_id: str, request: RaiseChildBudget) -> SpawnedChild:
        """Grow a sub-agent's budget through its parent's workflow, out of the parent's remainder."""
        return await self._update(parent_task_id, RAISE_CHILD_BUDGET_UPDATE, request, SpawnedChild)

    async def spawn(self, task_id: str, request: SpawnAgentArgs) -> SpawnedChild:
        return await self._update(task_id, SPAWN_UPDATE, request, SpawnedChild)

    async def answer(self, task_id: str, answer: HumanAnswer) -> None:
        await self._update(task_id, ANSWER_UPDATE, answer, None)

    async def cancel(self, task_id: str, request: CancelRequest) -> None:
        client = await self.client()
        try:
            await client.get_workflow_handle(task_id).signal(
                CANCEL_SIGNAL, request, rpc_timeout=timedelta(seconds=CONNECT_TIMEOUT_S)
            )
        except RPCError as exc:
            raise _rpc_error(task_id, exc) from exc

    async def simulate_preemption(self, task_id: str) -> None:
        client = await self.client()
        try:
            await client.get_workflow_handle(task_id).signal(
                SIMULATE_PREEMPTION_SIGNAL, rpc_timeout=timedelta(seconds=CONNECT_TIMEOUT_S)
            )
        except RPCError as exc:
            raise _rpc_error(task_id, exc) from exc

    async def node_gone(self, task_id: str, gone: NodeGone) -> None:
        """Tell a task that a node it may be running on is no longer trusted: its step moves elsewhere."""
        client = await self.client()
        try:
            await client.get_workflow_handle(task_id).signal(
                NODE_GONE_SIGNAL, gone, rpc_timeout=timedelta(seconds=CONNECT_TIMEOUT_S)
            )
        except RPCError as exc:
            raise _rpc_error(task_id, exc) from exc

    async def loop_transcript(self, task_id: str) -> LoopTranscript | None:
        """How much of its own loop's conversation the task holds; None when its agent runs Berth's loop."""
        return await self._loop_query(task_id, LOOP_TRANSCRIPT_QUERY, None, LoopTranscript | None)

    async def loop_call(self, task_id: str, call: LoopCall) -> LoopReply:
        """One model call of the task's own loop: answered once the step's generation is done (minutes, when
        the model must load first), so it waits as long as a step may."""
        return await self._update(task_id, LOOP_CALL_UPDATE, call, LoopReply, timeout=LOOP_CALL_TIMEOUT)

    async def loop_tool_result(self, task_id: str, result: LoopToolResult) -> None:
        await self._update(task_id, LOOP_TOOL_RESULT_UPDATE, result, None)

    async def loop_asked(self, task_id: str, conversation: str) -> list[dict[str, str]]:
        """The shapes of the calls the task's own loop was answered on this conversation (by its chain hash)."""
        return await self._loop_query(task_id, LOOP_ASKED_QUERY, conversation, list[dict[str, str]])

    async def loop_tool_result_of(self, task_id: str, call_id: str) -> str | None:
        return await self._loop_query(task_id, LOOP_TOOL_RESULT_QUERY, call_id, str | None)

    async def _loop_query(self, task_id: str, name: str, arg: object, result_type: object) -> Any:
        """A query of an own loop's state, whose refusal is the workflow's word (not an absent task's).
        `result_type` is a type hint such as `X | None`, which the data converter decodes the answer into."""
        client = await self.client()
        handle = client.get_workflow_handle(task_id)
        try:
            return await handle.query(
                name,
                args=[] if arg is None else [arg],
                result_type=result_type,  # type: ignore[call-overload]  # temporalio says `type`; its converter takes `X | None`
                rpc_timeout=self.update_timeout,
            )
        except (WorkflowQueryFailedError, WorkflowQueryRejectedError) as exc:
            raise UpdateRejected(f"task {task_id} could not say ({name}): {exc}") from exc
        except RPCTimeoutOrCancelledError as exc:
            raise TemporalUnavailable(
                f"the workflow of task {task_id} did not answer; is a Berth worker running?"
            ) from exc
        except RPCError as exc:
            raise _rpc_error(task_id, exc) from exc

    async def loop_finish(self, task_id: str, finish: LoopFinish) -> None:
        await self._update(task_id, LOOP_FINISH_UPDATE, finish, None)

    async def loop_ask_approval(self, task_id: str, request: ApprovalRequest) -> LoopApprovals:
        return await self._update(task_id, LOOP_ASK_APPROVAL_UPDATE, request, LoopApprovals)

    async def loop_decide(self, task_id: str, decision: ApprovalDecision) -> LoopApprovals:
        return await self._update(task_id, LOOP_DECIDE_UPDATE, decision, LoopApprovals)

    async def loop_approvals(self, task_id: str) -> LoopApprovals | None:
        return await self._loop_query(task_id, LOOP_APPROVALS_QUERY, None, LoopApprovals | None)

    @overload
    async def _update(
        self, task_id: str, name: str, arg: object, result_type: type[_R], timeout: timedelta | None = None
    ) -> _R: ...

    @overload
    async def _update(
        self, task_id: str, name: str, arg: object, result_type: None, timeout: timedelta | None = None
    ) -> None: ...

    async def _update(
        self, task_id: str, name: str, arg: object, result_type: type[_R] | None, timeout: timedelta | None = None
    ) -> _R | None:
        client = await self.client()
        handle = client.get_workflow_handle(task_id)
        timeout = timeout or self.update_timeout
        try:
            return await handle.execute_update(name, arg, result_type=result_type, rpc_timeout=timeout)
        except WorkflowUpdateFailedError as exc:
            cause = exc.cause
            raise UpdateRejected(getattr(cause, "message", None) or str(cause), getattr(cause, "type", None)) from exc
        except RPCTimeoutOrCancelledError as exc:
            raise TemporalUnavailable(
                f"the workflow of task {task_id} did not answer within {timeout.total_seconds():g} s;"
                " is a Berth worker running?"
            ) from exc
        except RPCError as exc:
            raise _rpc_error(task_id, exc) from exc


def _rpc_error(task_id: str, exc: RPCError) -> Exception:
    if exc.status == RPCStatusCode.NOT_FOUND:
        return WorkflowGone(f"task {task_id} is not running: {exc.message}")
    return TemporalUnavailable(f"Temporal refused a call for task {task_id}: {exc.message}")
