"""What Temporal says of a task's workflow, read as cheaply as it can be: one DescribeWorkflowExecution per task,
and a page of history read backwards only where that is not enough (a workflow task on a retry: why it failed;
a closed run: how it ended).

The workflow is described by its id alone, so Temporal answers for its latest run: a continue-as-new chain is
followed for free, and the history read is that run's. A sub-agent is a workflow of its own (its id is its task
id), described the same way.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType, TimeoutType, WorkflowTaskFailedCause
from temporalio.api.failure.v1 import Failure
from temporalio.api.history.v1 import HistoryEvent
from temporalio.api.workflowservice.v1 import GetWorkflowExecutionHistoryReverseRequest
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from sdk import TaskState

from .verdict import Closed, ClosedHow, Failing, Finding, Missing, Running

# Events read backwards from the newest to find the failure of a workflow task on a retry. Its retries are not
# written to history (Temporal keeps them transient), so the failure is the newest workflow-task event; only what
# arrived since (signals, activity results, timers) lies between, a handful in practice: two pages are ample.
HISTORY_PAGE = 50
HISTORY_PAGES = 2
_CAUSE_PREFIX = "WORKFLOW_TASK_FAILED_CAUSE_"
_CLOSED: dict[WorkflowExecutionStatus, ClosedHow] = {
    WorkflowExecutionStatus.COMPLETED: "completed",
    WorkflowExecutionStatus.FAILED: "failed",
    WorkflowExecutionStatus.TERMINATED: "terminated",
    WorkflowExecutionStatus.TIMED_OUT: "timed_out",
    WorkflowExecutionStatus.CANCELED: "cancelled",
}


async def read_workflow(client: Client, task_id: str, timeout: timedelta) -> Finding:
    """What Temporal says of the task's workflow now. Raises RPCError (other than not found) and
    RPCTimeoutOrCancelledError when Temporal does not answer: the caller tries again next round."""
    try:
        described = await client.get_workflow_handle(task_id).describe(rpc_timeout=timeout)
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return Missing()
        raise
    status, run_id = described.status, described.run_id
    if status in _CLOSED:
        return await _closed(client, task_id, run_id, _CLOSED[status], described.close_time, timeout)
    raw = described.raw_description
    if status != WorkflowExecutionStatus.RUNNING or not raw.HasField("pending_workflow_task"):
        return Running()  # no workflow task pending: nothing is being retried
    attempt = raw.pending_workflow_task.attempt
    if attempt <= 1:
        return Running()
    return Running(await _failing(client, task_id, run_id, attempt, timeout))


async def _failing(client: Client, task_id: str, run_id: str, attempt: int, timeout: timedelta) -> Failing:
    """The failure that began the pending workflow task's retries: the newest workflow-task failure or timeout."""
    async for event in _backwards(client, task_id, run_id, timeout, HISTORY_PAGE, HISTORY_PAGES):
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
            failed = event.workflow_task_failed_event_attributes
            return Failing(attempt, _time(event), _failure_text(failed.failure), _cause(failed.cause))
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT:
            kind = TimeoutType.Name(event.workflow_task_timed_out_event_attributes.timeout_type)
            error = (
                f"its workflow task timed out ({kind.removeprefix('TIMEOUT_TYPE_').lower()}): no worker finished"
                " it in time (one that crashes or hangs on it)"
            )
            return Failing(attempt, _time(event), error, "timeout")
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            break  # no failure since its last success in history: only transient timeouts
    return Failing(attempt, None, None, "timeout")


async def _closed(
    client: Client, task_id: str, run_id: str, how: ClosedHow, at: datetime | None, timeout: timedelta
) -> Closed:
    """How the run ended, from its last event: the result, the failure, the termination's reason."""
    at = at.astimezone(UTC) if at is not None else None
    async for event in _backwards(client, task_id, run_id, timeout, 1, 1):
        match event.event_type:
            case EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
                payloads = event.workflow_execution_completed_event_attributes.result.payloads
                return Closed(how, at, result=await _state_in(client, list(payloads)))
            case EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED:
                return Closed(how, at, _failure_text(event.workflow_execution_failed_event_attributes.failure))
            case EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED:
                terminated = event.workflow_execution_terminated_event_attributes
                return Closed(how, at, terminated.reason or None, terminated.identity or None)
    return Closed(how, at)


async def _state_in(client: Client, payloads: list) -> TaskState | None:
    """A completed run's result as the task's state, or None when it is not one Berth can read."""
    if not payloads:
        return None
    try:
        [state] = await client.data_converter.decode(payloads, [TaskState])
    except Exception:  # a result of another shape or codec: the caller says it could not be read
        return None
    return state if isinstance(state, TaskState) else None


async def _backwards(
    client: Client, task_id: str, run_id: str, timeout: timedelta, page: int, pages: int
) -> AsyncIterator[HistoryEvent]:
    """The run's history events, newest first, at most `pages` pages of `page`."""
    token = b""
    for _ in range(pages):
        answer = await client.workflow_service.get_workflow_execution_history_reverse(
            GetWorkflowExecutionHistoryReverseRequest(
                namespace=client.namespace,
                execution=WorkflowExecution(workflow_id=task_id, run_id=run_id),
                maximum_page_size=page,
                next_page_token=token,
            ),
            timeout=timeout,
        )
        for event in answer.history.events:
            yield event
        token = answer.next_page_token
        if not token:
            return


def _failure_text(failure: Failure) -> str | None:
    """The failure's message, with its causes' (an activity's error under the workflow's)."""
    parts, seen = [], failure
    while seen.message or seen.HasField("cause"):
        if seen.message:
            parts.append(seen.message)
        if not seen.HasField("cause"):
            break
        seen = seen.cause
    return ": ".join(parts) or None


def _cause(cause: WorkflowTaskFailedCause.ValueType) -> str:
    return WorkflowTaskFailedCause.Name(cause).removeprefix(_CAUSE_PREFIX).lower()


def _time(event: HistoryEvent) -> datetime | None:
    return event.event_time.ToDatetime(tzinfo=UTC) if event.HasField("event_time") else None
