"""A task's history: its checkpoints, forking a new task from one, and its token ledger."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request, Response, status
from pydantic import ValidationError

from sdk import ForkSource, TaskSpec, TaskState
from sdk.wire.limits import MAX_STORED_INT
from sdk.wire.resources import CheckpointDetail, CheckpointSummary, ForkRequest, Ledger, LedgerEntry, LedgerTotals

from ..store import CheckpointCorrupt, CheckpointNotFound
from .audit import note_target
from .auth import Caller, TaskWriter
from .errors import ERROR_RESPONSES, ApiError, conflict, field_of, invalid, not_found
from .services import Svc
from .submission import check_submission_rate, submit_task

router = APIRouter(prefix="/v1/tasks/{task_id}", tags=["tasks"], responses=ERROR_RESPONSES)


@router.get("/checkpoints", response_model=list[CheckpointSummary])
async def list_checkpoints(task_id: str, svc: Svc, caller: Caller) -> list[CheckpointSummary]:
    await svc.task_record(task_id, caller)
    rows = await svc.db(svc.store.checkpoints.list, task_id)
    return [CheckpointSummary.model_validate(r) for r in rows]


@router.get("/checkpoints/{seq}", response_model=CheckpointDetail)
async def read_checkpoint(
    task_id: str, seq: Annotated[int, Path(ge=0, le=MAX_STORED_INT)], svc: Svc, caller: Caller
) -> CheckpointDetail:
    """One checkpoint whole: the conversation up to it, its scratch and the task state it saved."""
    await svc.task_record(task_id, caller)
    ref = await svc.db(svc.store.checkpoints.find, task_id, seq)
    if ref is None:
        raise _no_checkpoint(task_id, seq)
    try:
        content = await svc.db(svc.store.checkpoints.read, ref.id)
    except CheckpointNotFound:
        raise _no_checkpoint(task_id, seq) from None
    except CheckpointCorrupt as exc:
        raise ApiError(500, f"checkpoint {seq} of task {task_id} failed verification: {exc}", code="corrupt") from None
    return CheckpointDetail.model_validate(content)


@router.post("/fork", status_code=status.HTTP_201_CREATED, response_model=TaskState)
async def fork(
    task_id: str, request: ForkRequest, http: Request, response: Response, svc: Svc, caller: TaskWriter
) -> TaskState:
    """Start a new task from one of this task's checkpoints, with the source's spec and any overrides.

    The workflow of the new task copies the checkpoint as its starting conversation; it is a task of the
    source's tenant, and counts against the caller's submission rate.
    """
    record = await svc.task_record(task_id, caller)
    if record.spec_json is None:
        raise invalid("task_id", f"task {task_id} has no stored spec to fork from")
    if await svc.db(svc.store.checkpoints.find, task_id, request.checkpoint_seq) is None:
        raise _no_checkpoint(task_id, request.checkpoint_seq)
    agent = await svc.db(svc.store.agents.get, record.state.agent, record.state.agent_version)
    if agent is not None and agent.loop == "own":
        raise conflict(
            f"task {task_id} ran its author's own loop: where that loop stood lives in the loop, not in"
            " Berth's checkpoints, so a fork could not go on from one",
            field="task_id",
        )

    source = TaskSpec.model_validate_json(record.spec_json)
    overrides = request.model_dump(exclude={"checkpoint_seq"}, exclude_none=True)
    if "budget" in overrides:
        overrides["budget"] = request.budget  # keep the Budget object (an absolute deadline stays as is)
    try:
        spec = TaskSpec.model_validate({**source.model_dump(), "task_id": None, **overrides})
    except ValidationError as exc:
        first = exc.errors()[0]
        raise invalid(field_of(first["loc"]), first["msg"]) from None
    check_submission_rate(svc, caller)
    submitted = await submit_task(
        svc,
        spec,
        caller,
        fork_of=ForkSource(task_id=task_id, checkpoint_seq=request.checkpoint_seq),
        agent_version=record.state.agent_version,
    )
    note_target(http.scope, submitted.state.task_id)
    if not submitted.created:
        response.status_code = status.HTTP_200_OK
    return submitted.state


@router.get("/ledger", response_model=Ledger)
async def ledger(task_id: str, svc: Svc, caller: Caller) -> Ledger:
    """Every LLM call the task paid for, with where it ran, and the totals."""
    await svc.task_record(task_id, caller)
    entries = await svc.db(svc.store.ledger.entries, task_id)
    totals = await svc.db(svc.store.ledger.totals, task_id)
    return Ledger(
        task_id=task_id,
        entries=[LedgerEntry.model_validate(e) for e in entries],
        totals=LedgerTotals.model_validate(totals),
    )


def _no_checkpoint(task_id: str, seq: int) -> ApiError:
    return not_found(f"task {task_id} has no checkpoint {seq}", field="checkpoint_seq")
