"""Node-agent routes: the bookkeeping of LLM steps that run on a GPU node.

A node has no database, so the LLM step activity running there does its bookkeeping
(activities/ports.py `StepBooks`) through these routes: `prepare` before the model call and
`settle` after it, two round trips per step; `booked` and `interrupted` serve retried and resumed attempts only.
They write exactly what a step on the control queue writes (activities/step_books.py), and
only for a node that presents its node secret, like its heartbeats, and that holds a lease for
the task: a node reads and books only the tasks the pool sent it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Annotated, TypeVar

from fastapi import APIRouter, Header

from activities.ports import LedgerEntry
from activities.step_books import StoreStepBooks
from sdk import NotFound, TaskState, Unauthorized
from sdk._fleet import NODE_SECRET_HEADER
from sdk._step_books import (
    BookedRequest,
    BookInterruptedRequest,
    LedgerEntryBody,
    PreparedStepBody,
    PrepareStepRequest,
    SettleStepRequest,
    SettleStepResult,
)

from ..store.checkpoints import CheckpointConflict, CheckpointCorrupt, CheckpointNotFound
from .errors import ERROR_RESPONSES, ApiError, conflict, invalid, not_found
from .services import Services, Svc

router = APIRouter(prefix="/v1/nodes/{node_id}/steps", tags=["fleet"], responses={
    **ERROR_RESPONSES, 401: {"description": "the node secret is missing or wrong"},
    403: {"description": "the node holds no lease for the task"},
})
NodeSecret = Annotated[str | None, Header(alias=NODE_SECRET_HEADER)]
T = TypeVar("T")


@router.post("/prepare", response_model=PreparedStepBody)
async def prepare(node_id: str, req: PrepareStepRequest, svc: Svc, node_secret: NodeSecret = None) -> PreparedStepBody:
    """Node agents only: write the step's pending predecessor (when given), return the conversation to send."""
    if req.pending is not None and req.pending.state.task_id != req.task_id:
        raise invalid("pending.state.task_id", f"the pending step's state is of task {req.pending.state.task_id!r},"
                                               f" not of {req.task_id!r}, the task this step books")
    prepared = await _call(svc, node_id, node_secret, {req.task_id},
                           lambda books: books.prepare(req.task_id, req.checkpoint, req.pending),
                           keeps_tenant=req.pending.state if req.pending is not None else None)
    return PreparedStepBody(checkpoint=prepared.checkpoint, messages=prepared.messages)


@router.post("/settle", response_model=SettleStepResult)
async def settle(node_id: str, req: SettleStepRequest, svc: Svc, node_secret: NodeSecret = None) -> SettleStepResult:
    """Node agents only: book a model call under its (task, step, attempt) key and announce it once."""
    def book(books: StoreStepBooks) -> bool:
        return books.settle(_entry(req.entry), _labelled_by_owner(svc, req.entry.task_id, req.event))

    recorded = await _call(svc, node_id, node_secret, {req.entry.task_id}, book)
    return SettleStepResult(recorded=recorded)


def _labelled_by_owner(svc: Services, task_id: str, event: dict) -> dict:
    """The call's event with the tenant the store says owns the task: its tokens and cost are booked to that
    tenant's metrics, whatever tenant the node wrote (a node is trusted with its steps, not with who owns them)."""
    labelled = {k: v for k, v in event.items() if k != "tenant"}
    if (stored := svc.store.tasks.get(task_id)) is not None:
        labelled["tenant"] = stored.state.tenant
    return labelled


@router.post("/booked", response_model=list[LedgerEntryBody])
async def booked(node_id: str, req: BookedRequest, svc: Svc, node_secret: NodeSecret = None) -> list[LedgerEntryBody]:
    """Node agents only: what earlier attempts of a step booked (a retried attempt asks)."""
    entries = await _call(svc, node_id, node_secret, {req.task_id},
                          lambda books: books.booked(req.task_id, req.step, req.before_attempt))
    return [LedgerEntryBody(**dataclasses.asdict(e)) for e in entries]


@router.post("/interrupted", status_code=204, response_model=None)
async def book_interrupted(node_id: str, req: BookInterruptedRequest, svc: Svc, node_secret: NodeSecret = None) -> None:
    """Node agents only: book the tokens of attempts that died unheard (lost, or kept by a continuation)."""
    await _call(svc, node_id, node_secret, {e.task_id for e in req.entries},
                lambda books: books.book_interrupted([_entry(e) for e in req.entries]))


def _entry(body: LedgerEntryBody) -> LedgerEntry:
    return LedgerEntry(**body.model_dump())


class NoLease(Exception):
    def __init__(self, node_id: str, task_id: str) -> None:
        super().__init__(f"node {node_id!r} holds no lease for task {task_id!r}; it may book only the steps"
                         " the pool leased to it")


class TenantMoved(Exception):
    def __init__(self, task_id: str) -> None:
        super().__init__(f"the pending step's state gives task {task_id!r} another tenant; a node may not move a task")


async def _call(svc: Services, node_id: str, node_secret: str | None, task_ids: set[str],
                fn: Callable[[StoreStepBooks], T], keeps_tenant: TaskState | None = None) -> T:
    """Authenticate the node and check its leases, then run `fn` over the store's books: one thread hop;
    refusals in the API's shape. `keeps_tenant`: a task state the node would write, which must not move
    its task to another tenant (a node is trusted with its leased steps, not with who owns them)."""
    store = svc.store

    def run() -> T:
        store.fleet.authenticate(node_id, node_secret)
        for task_id in sorted(task_ids):
            if not store.leases.node_holds(node_id, task_id):
                raise NoLease(node_id, task_id)
        if keeps_tenant is not None:
            stored = store.tasks.get(keeps_tenant.task_id)
            if stored is not None and stored.state.tenant != keeps_tenant.tenant:
                raise TenantMoved(keeps_tenant.task_id)
        return fn(StoreStepBooks(store.checkpoints, store.tasks, store.events, store.ledger))

    try:
        return await svc.db(run)
    except CheckpointNotFound as exc:
        raise not_found(exc.message, field="checkpoint") from None
    except NotFound as exc:
        raise not_found(exc.message, field=exc.field or "node_id") from None
    except Unauthorized as exc:
        raise ApiError(401, exc.message, field=exc.field) from None
    except (CheckpointConflict, CheckpointCorrupt) as exc:
        raise conflict(str(exc), field="checkpoint") from None
    except NoLease as exc:
        raise ApiError(403, str(exc), field="task_id") from None
    except TenantMoved as exc:
        raise ApiError(403, str(exc), field="pending.state.tenant") from None
