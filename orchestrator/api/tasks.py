"""Task routes: submit, list, read, and steer (cancel, raise budget, answer)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Query, Request, Response, status
from pydantic import ConfigDict, Field

from sdk import Spend, TaskEvent, TaskSpec, TaskState, TaskStatus
from sdk.wire.builtins import SpawnAgentArgs
from sdk.wire.contracts import CancelRequest, HumanAnswer, RaiseBudget, RaiseChildBudget, SpawnedChild
from sdk.wire.identity import CreatedKey, Role
from sdk.wire.limits import MAX_PAGE, MAX_REASON_CHARS, MAX_STORED_INT
from sdk.wire.task_events import InterruptionEvent

from ..store import TaskRecord
from .admission import SubmitRequest, admit
from .audit import note_target
from .auth import Caller, TaskWriter
from .delegation import list_child, submit_as_child
from .errors import ERROR_RESPONSES, ApiError, conflict, invalid, unavailable
from .principal import in_tree
from .services import Services, Svc
from .submission import check_submission_rate, submit_task
from .temporal_gateway import TemporalUnavailable, UpdateRejected, WorkflowGone


# The contracts accept unknown fields (they travel through Temporal and may grow); a client
# request must not, so that a typo ("token": 100) is refused instead of silently ignored.
class RaiseBudgetRequest(RaiseBudget):
    model_config = ConfigDict(extra="forbid")


class AnswerRequest(HumanAnswer):
    model_config = ConfigDict(extra="forbid")


class CancelBody(CancelRequest):
    model_config = ConfigDict(extra="forbid")

    # Bounded here, where a client sends it, as MCP and the CLI bound it: the reason becomes the task's error,
    # echoed by every later refusal. The signal's own contract stays open for the workflow's reasons.
    reason: str = Field(default=CancelRequest.model_fields["reason"].default, min_length=1, max_length=MAX_REASON_CHARS)


class SpawnRequest(SpawnAgentArgs):
    model_config = ConfigDict(extra="forbid")


router = APIRouter(prefix="/v1/tasks", tags=["tasks"], responses=ERROR_RESPONSES)


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=TaskState,
    responses={200: {"model": TaskState, "description": "the same task was submitted before"}},
)
async def submit(body: SubmitRequest, request: Request, response: Response, svc: Svc, caller: TaskWriter) -> TaskState:
    """Submit a task. Resubmitting an id with the same spec returns it (200); another spec is a 409.

    A key confined to a tenant submits for it; without a budget, the tenant's default applies. A task token
    (`POST /v1/tasks/{id}/token`) starts a sub-agent of its task instead, its budget carved from the task's."""
    check_submission_rate(svc, caller)
    if caller.task_id is not None:
        child = await submit_as_child(svc, caller, body)
        note_target(request.scope, child.task_id)
        return child
    submitted = await submit_task(svc, await admit(svc, caller, body), caller)
    note_target(request.scope, submitted.state.task_id)
    if not submitted.created:
        response.status_code = status.HTTP_200_OK
    return submitted.state


@router.get("", response_model=list[TaskState])
async def list_tasks(
    svc: Svc,
    caller: Caller,
    status_: Annotated[TaskStatus | None, Query(alias="status")] = None,
    agent: str | None = None,
    tenant: str | None = None,
    parent: Annotated[str | None, Query(description="only sub-agents of this task")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
    offset: Annotated[int, Query(ge=0, le=MAX_STORED_INT)] = 0,
) -> list[TaskState]:
    """Tasks, newest first, as last stored (listing never waits on Temporal); only the caller's tenant's
    when its key is confined to one."""
    if caller.tenant is not None:
        if tenant is not None and tenant != caller.tenant:
            return []
        tenant = caller.tenant
    if parent is not None:
        parent = await svc.task_id_meant(parent, caller)
    if caller.task_id is not None:
        # A task token sees its own task and its sub-agents: the ids that extend its own.
        found = await svc.db(
            svc.store.tasks.list,
            tenant=tenant,
            status=status_.value if status_ else None,
            agent=agent,
            parent_task_id=parent,
            id_prefix=caller.task_id,
            limit=MAX_PAGE * 4,
        )
        return [t for t in found if in_tree(caller.task_id, t.task_id)][offset : offset + limit]
    return await svc.db(
        svc.store.tasks.list,
        tenant=tenant,
        status=status_.value if status_ else None,
        agent=agent,
        parent_task_id=parent,
        limit=limit,
        offset=offset,
    )


@router.get("/{task_id}", response_model=TaskState)
async def get_task(task_id: str, svc: Svc, caller: Caller) -> TaskState:
    """The task's live state when its workflow answers, else the state it last stored."""
    return await current_state(svc, await svc.task_record(task_id, caller))


@router.get("/{task_id}/interruptions", response_model=list[TaskEvent])
async def list_interruptions(task_id: str, svc: Svc, caller: Caller) -> list[TaskEvent]:
    """Each time a node was lost or preempted under the task: where, what it cost, where the step resumed."""
    await svc.task_record(task_id, caller)
    return await svc.db(svc.store.events.of_kind, task_id, InterruptionEvent.KIND)


@router.post("/{task_id}/cancel", status_code=status.HTTP_202_ACCEPTED, response_model=TaskState)
async def cancel(
    task_id: str, svc: Svc, caller: TaskWriter, request: Annotated[CancelBody | None, Body()] = None
) -> TaskState:
    """Ask the task to stop: a running generation is cut at its next heartbeat and booked, and the task ends
    `cancelled` once that is settled (hence 202)."""
    record = await svc.task_record(task_id, caller)
    require_running(record)
    try:
        await svc.temporal.cancel(task_id, CancelRequest(reason=request.reason) if request else CancelRequest())
    except (TemporalUnavailable, WorkflowGone) as exc:
        raise _refusal(exc) from None
    return await current_state(svc, record)


@router.post("/{task_id}/simulate-preemption", status_code=status.HTTP_202_ACCEPTED, response_model=TaskState)
async def simulate_preemption(task_id: str, svc: Svc, caller: TaskWriter) -> TaskState:
    """Cut the task's running (or next) model call off as a lost node would: the step resumes on another
    node from its checkpoint. For authors checking that their tools are idempotent; other tasks are untouched."""
    record = await svc.task_record(task_id, caller)
    require_running(record)
    try:
        await svc.temporal.simulate_preemption(task_id)
    except (TemporalUnavailable, WorkflowGone) as exc:
        raise _refusal(exc) from None
    return await current_state(svc, record)


@router.post("/{task_id}/raise-budget", response_model=Spend)
async def raise_budget(task_id: str, request: RaiseBudgetRequest, svc: Svc, caller: TaskWriter) -> Spend:
    """Add tokens and/or dollars to the task's budget; a task in awaiting_budget resumes. A sub-agent's budget
    grows only out of its parent's remainder: the parent's workflow carves it (409 with the numbers beyond it)."""
    if request.tokens <= 0 and request.usd <= 0:
        raise invalid("tokens", "raise at least one of tokens or usd by more than 0")
    record = await svc.task_record(task_id, caller)
    require_running(record)
    parent = record.state.parent_task_id
    try:
        if parent is None:
            return await svc.temporal.raise_budget(task_id, RaiseBudget(tokens=request.tokens, usd=request.usd))
        child = await svc.temporal.raise_child(
            parent, RaiseChildBudget(child_task_id=task_id, tokens=request.tokens, usd=request.usd)
        )
    except (TemporalUnavailable, WorkflowGone, UpdateRejected) as exc:
        raise _refusal(exc) from None
    spend = (await current_state(svc, record)).spend
    # The child hears of its grant by a signal the parent sends after carving it: it may not have yet.
    return spend.model_copy(
        update={
            "token_limit": max(spend.token_limit, child.tokens),
            "usd_limit": child.usd if child.usd is not None else spend.usd_limit,
        }
    )


@router.post("/{task_id}/spawn", status_code=status.HTTP_201_CREATED, response_model=SpawnedChild)
async def spawn(task_id: str, request: SpawnRequest, svc: Svc, caller: TaskWriter) -> SpawnedChild:
    """Start a sub-agent whose budget is carved from this task's remainder (returned when it ends)."""
    record = await svc.task_record(task_id, caller)
    require_running(record)
    agent = await svc.db(svc.store.agents.get, request.agent)
    if agent is None:
        raise invalid("agent", f"no agent named {request.agent!r} is registered")
    try:
        child = await svc.temporal.spawn(task_id, SpawnAgentArgs.model_validate(request.model_dump()))
    except (TemporalUnavailable, WorkflowGone, UpdateRejected) as exc:
        raise _refusal(exc) from None
    # Its workflow gives it the parent's priority (workflows/sub_agents.py).
    priority = TaskSpec.model_validate_json(record.spec_json).priority if record.spec_json else 0
    await list_child(svc, child, agent, record.state, request.input, priority)
    return child


@router.post("/{task_id}/answer", response_model=TaskState)
async def answer(task_id: str, request: AnswerRequest, svc: Svc, caller: TaskWriter) -> TaskState:
    """Answer the question of a task in awaiting_input."""
    record = await svc.task_record(task_id, caller)
    require_running(record)
    if record.state.status == TaskStatus.queued:
        raise conflict(f"task {task_id} is not awaiting input (it has not started)", field="task_id")
    try:
        await svc.temporal.answer(task_id, HumanAnswer(text=request.text))
    except (TemporalUnavailable, WorkflowGone, UpdateRejected) as exc:
        raise _refusal(exc) from None
    return await current_state(svc, record)


@router.post("/{task_id}/token", status_code=status.HTTP_201_CREATED, response_model=CreatedKey)
async def task_token(task_id: str, http: Request, svc: Svc, caller: TaskWriter) -> CreatedKey:
    """A token for the task's own tools and MCP servers: it sees only this task and its sub-agents, whatever it
    submits is a sub-agent paid from this task's budget, and it stops working when the task ends. Shown once."""
    record = await svc.task_record(task_id, caller)
    require_running(record)
    created = await svc.db(
        svc.store.keys.create, Role.agent, record.state.tenant, f"task {task_id}", "a task token", task_id
    )
    note_target(http.scope, created.key_id)
    return created


async def current_state(svc: Services, record: TaskRecord) -> TaskState:
    stored = record.state
    # A queued row means the workflow has not run its first task yet, so no worker could
    # answer a query; the store is as fresh as anything Temporal would say. A stuck workflow cannot answer one
    # either (its code does not run), and only the stored state says that it is stuck and why.
    if stored.status.is_final or stored.status == TaskStatus.queued or stored.stuck is not None:
        return stored
    live = await svc.temporal.query_state(stored.task_id)
    return live or stored


def require_running(record: TaskRecord) -> None:
    state = record.state
    if state.status.is_final:
        reason = f": {state.error}" if state.error else ""
        raise conflict(f"task {state.task_id} has already ended ({state.status.value}{reason})", field="task_id")


def _refusal(exc: Exception) -> ApiError:
    if isinstance(exc, TemporalUnavailable):
        return unavailable(str(exc))
    return conflict(str(exc), field=_field_named_by(str(exc)) or "task_id")


def _field_named_by(message: str) -> str | None:
    """The field a workflow's refusal names ("tokens: ..."), as the API's other refusals carry it; else the task's
    own state is to blame (`task_id`)."""
    head, sep, _ = message.partition(": ")
    return head if sep and head.replace(".", "").replace("_", "").isalpha() and head.islower() else None
