"""Routes of an own loop's tool calls that wait for a person: the loop asks, a person approves or rejects.

The loop (`sdk.openai_agents`, when a tool has `needs_approval`) posts the calls it stopped at and its own state;
the task then waits `awaiting_input` with a question naming each tool and its arguments. Whoever may act on the
task approves or rejects from the SDK, the CLI, the UI or MCP; the loop (or its re-run, after its process died)
reads the decisions and its state back and resumes. Asking needs the task's writer, as the loop's calls do.
"""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from sdk import TaskState
from sdk.wire.limits import MAX_REASON_CHARS
from sdk.wire.loop_approvals import ApprovalDecision, ApprovalRequest, LoopApprovals

from .auth import TaskWriter
from .errors import ERROR_RESPONSES, ApiError, conflict, not_found, unavailable
from .services import Services, Svc
from .tasks import current_state, require_running
from .temporal_gateway import TemporalUnavailable, UpdateRejected, WorkflowGone

router = APIRouter(prefix="/v1/tasks", tags=["own loop"], responses=ERROR_RESPONSES)


class AskBody(ApprovalRequest):
    model_config = ConfigDict(extra="forbid")


class ApproveBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    call_id: str | None = Field(default=None, min_length=1, max_length=256, description="one call; all when unset")


class RejectBody(ApproveBody):
    reason: str | None = Field(
        default=None, max_length=MAX_REASON_CHARS, description="what the model is told instead of the tool's output"
    )


@router.post("/{task_id}/approvals", response_model=LoopApprovals)
async def ask(task_id: str, body: AskBody, svc: Svc, caller: TaskWriter) -> LoopApprovals:
    """The loop stopped at tool calls that need a person's approval: the task waits awaiting_input, holding the
    loop's state. Asking again for the same calls (a re-run after a crash) answers with what is held, decisions
    made meanwhile included."""
    record = await svc.task_record(task_id, caller)
    require_running(record)
    try:
        return await svc.temporal.loop_ask_approval(task_id, ApprovalRequest.model_validate(body.model_dump()))
    except (TemporalUnavailable, WorkflowGone, UpdateRejected) as exc:
        raise _refusal(exc) from None


@router.get("/{task_id}/approvals", response_model=LoopApprovals)
async def held(task_id: str, svc: Svc, caller: TaskWriter) -> LoopApprovals:
    """The calls the loop last stopped at, the decisions on them so far and the loop's state (404 when it never
    stopped for one)."""
    record = await svc.task_record(task_id, caller)
    require_running(record)
    try:
        approvals = await svc.temporal.loop_approvals(task_id)
    except (TemporalUnavailable, WorkflowGone, UpdateRejected) as exc:
        raise _refusal(exc) from None
    if approvals is None:
        raise not_found(f"task {task_id}'s loop never asked for an approval", field="approvals")
    return approvals


@router.post("/{task_id}/approve", response_model=TaskState)
async def approve(task_id: str, body: ApproveBody, svc: Svc, caller: TaskWriter) -> TaskState:
    """Approve the waiting tool call `call_id` (every waiting call, without one): its tool runs when the loop
    resumes."""
    return await _decide(svc, task_id, caller, ApprovalDecision(approve=True, call_id=body.call_id))


@router.post("/{task_id}/reject", response_model=TaskState)
async def reject(task_id: str, body: RejectBody, svc: Svc, caller: TaskWriter) -> TaskState:
    """Reject the waiting tool call `call_id` (every waiting call, without one): the model is told it was not
    approved (with `reason`, when given) instead of the tool's output."""
    decision = ApprovalDecision(approve=False, call_id=body.call_id, reason=body.reason)
    return await _decide(svc, task_id, caller, decision)


async def _decide(svc: Services, task_id: str, caller: TaskWriter, decision: ApprovalDecision) -> TaskState:
    record = await svc.task_record(task_id, caller)
    require_running(record)
    try:
        await svc.temporal.loop_decide(task_id, decision)
    except (TemporalUnavailable, WorkflowGone, UpdateRejected) as exc:
        raise _refusal(exc) from None
    return await current_state(svc, record)


def _refusal(exc: Exception) -> ApiError:
    if isinstance(exc, TemporalUnavailable):
        return unavailable(str(exc))
    message = str(exc)
    if isinstance(exc, UpdateRejected) and exc.kind == "UnknownToolCall":
        return not_found(message, field="calls")
    if isinstance(exc, UpdateRejected) and exc.kind == "NothingToApprove":
        return conflict(message, field="approvals")
    head, sep, _ = message.partition(": ")
    field = head if sep and head in {"call_id", "calls"} else "task_id"
    return conflict(message, field=field)
