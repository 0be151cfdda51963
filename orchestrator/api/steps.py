"""Node-agent routes: the bookkeeping of LLM steps that run on a GPU node.

A node has no database, so the LLM step activity running there does its bookkeeping
(activities/step/ports.py `StepBooks`) through these routes: `prepare` before the model call and
`settle` after it, two round trips per step; `booked` and `interrupted` serve retried and resumed
attempts only. A node may lie, so each route acts only on the lease the node holds right now:
- the node presents its node secret, and names a lease the store says it holds;
- `prepare` returns only the task's current checkpoint (its id and hash checked against the store),
  counts its prompt here, grants the answer tokens the lease's limits leave, and records the attempt
  it prepares with that reservation: the evidence that attempt started (only one its workflow can have
  started: the placement's first, or a continuation of one gone quiet);
- `settle` and `interrupted` book under the lease's task and step, only for attempts prepared, within
  what was reserved and allowed (orchestrator/api/lease_books.py), priced from the catalogue, with an
  event built here;
- a node writes no task state: a step's predecessor is written beside the store before the lease.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import timedelta
from typing import Annotated, TypeVar

from fastapi import APIRouter, Header

from activities.step.store_books import StoreStepBooks
from activities.step.tokens import count_prompt, sendable_tools
from sdk import Message, NotFound, Unauthorized
from sdk.wire.builtins import tools_offered
from sdk.wire.fleet import NODE_SECRET_HEADER
from sdk.wire.lease import call_extras_digest
from sdk.wire.ledger import KEPT, LOST, SETTLED, DeadTokens, LedgerEntry, booked_round
from sdk.wire.prices import Prices, generated_cost
from sdk.wire.step_books import (
    BookedRequest,
    BookInterruptedRequest,
    LedgerEntryBody,
    PreparedStepBody,
    PrepareStepRequest,
    SettleStepRequest,
    SettleStepResult,
)
from sdk.wire.step_call import CallReport, StepRef
from sdk.wire.task_events import KIND_OF, GenerationQuiet, Interruption, parse_event

from ..store import LeaseRecord, Store
from ..store.checkpoints import CheckpointConflict, CheckpointCorrupt, CheckpointNotFound
from ..store.tables import utcnow
from ..tokenizers import ModelTokenizer, TokenizerUnreadable, tokenizers_under
from .errors import ERROR_RESPONSES, ApiError, conflict, invalid, not_found
from .lease_books import (
    BookingRefused,
    CutEvidence,
    Round,
    booked_settled,
    check_dead,
    check_prepare,
    check_settle,
    reserve_call,
)
from .services import Services, Svc

router = APIRouter(
    prefix="/v1/nodes/{node_id}/steps",
    tags=["fleet"],
    responses={
        **ERROR_RESPONSES,
        401: {"description": "the node secret is missing or wrong"},
        403: {"description": "the node holds no such lease"},
    },
)
NodeSecret = Annotated[str | None, Header(alias=NODE_SECRET_HEADER)]
T = TypeVar("T")


@router.post("/prepare", response_model=PreparedStepBody)
async def prepare(node_id: str, req: PrepareStepRequest, svc: Svc, node_secret: NodeSecret = None) -> PreparedStepBody:
    """Node agents only: the conversation of the leased step's task and the answer tokens granted."""

    def run(lease: LeaseRecord, store: Store) -> PreparedStepBody:
        current = store.checkpoints.read_latest(lease.task_id)
        if current is None or req.checkpoint != current.ref:
            raise ApiError(
                409, f"checkpoint {req.checkpoint.id} is not task {lease.task_id!r}'s current one", field="checkpoint"
            )
        assert lease.limits is not None
        quiet = timedelta(seconds=lease.limits.quiet_after_s or svc.config.heartbeat_timeout_s)
        check_prepare(lease.limits, req.attempt, store.leases.prepared_under(lease.lease_id), utcnow(), quiet)
        messages, tools = _prompt_of(store, lease, current.messages, req)
        counted = count_prompt(messages, tools, _tokenizer(svc, lease.model))
        booked = booked_round(_entries(store, lease))  # its totals: a reservation needs no attempt's record
        reservation = reserve_call(lease.limits, booked, counted, _prices(svc, lease.model))
        if store.leases.reserve_call(lease.lease_id, reservation, req.attempt) is None:
            raise NoLease(node_id)
        return PreparedStepBody(checkpoint=current.ref, messages=current.messages, max_tokens=reservation.max_tokens)

    return await _call(svc, node_id, node_secret, req.lease_id, run)


@router.post("/settle", response_model=SettleStepResult)
async def settle(node_id: str, req: SettleStepRequest, svc: Svc, node_secret: NodeSecret = None) -> SettleStepResult:
    """Node agents only: book the leased step's call under its (task, step, attempt) key and announce it once."""

    def run(lease: LeaseRecord, store: Store) -> SettleStepResult:
        assert lease.limits is not None
        booked = _round(store, lease)
        prices = _prices(svc, lease.model)
        if booked.has(req.attempt, SETTLED):  # a retried settle: booked already, as it was priced then
            return SettleStepResult(
                recorded=False,
                cost_usd=next(e.cost_usd for e in booked.entries if (e.attempt, e.kind) == (req.attempt, SETTLED)),
            )
        cost = check_settle(lease.limits, booked, req, prices)
        totals = booked.totals
        placement = None
        if req.placement is not None:  # its timings are the node's word; where it ran is the lease's
            placement = req.placement.model_copy(
                update={"lease_id": lease.lease_id, "node_id": lease.node_id, "replica_id": lease.replica_id}
            )
        settled = _books(store).settle(
            _step_of(lease),
            CallReport(
                attempt=req.attempt,
                prompt_tokens=req.prompt_tokens,
                completion_tokens=req.completion_tokens,
                cost_usd=cost,
                ttft_s=req.ttft_s,
                duration_s=req.duration_s,
                served_by=f"{lease.node_id}/{lease.replica_id}",
                response_id=req.response_id,
                finish_reason=req.finish_reason,
                tool_calls=tuple(req.tool_calls),
                lost_tokens=totals.lost_tokens,
                kept_tokens=totals.kept_tokens,
                continued_tokens=req.continued_tokens,
                placement=placement,
            ),
        )
        return SettleStepResult(recorded=settled.recorded, cost_usd=settled.cost_usd)

    return await _call(svc, node_id, node_secret, req.lease_id, run)


@router.post("/booked", response_model=list[LedgerEntryBody])
async def booked(node_id: str, req: BookedRequest, svc: Svc, node_secret: NodeSecret = None) -> list[LedgerEntryBody]:
    """Node agents only: what earlier attempts of the leased step's round booked (a retried attempt asks)."""

    def run(lease: LeaseRecord, store: Store) -> list[LedgerEntryBody]:
        return [
            LedgerEntryBody(**dataclasses.asdict(e))
            for e in booked_settled(Round(_entries(store, lease)), req.before_attempt)
        ]

    return await _call(svc, node_id, node_secret, req.lease_id, run)


@router.post("/interrupted", status_code=204, response_model=None)
async def book_interrupted(node_id: str, req: BookInterruptedRequest, svc: Svc, node_secret: NodeSecret = None) -> None:
    """Node agents only: book the tokens of the round's attempts that died unheard (lost, or kept by a continuation)."""

    def run(lease: LeaseRecord, store: Store) -> None:
        assert lease.limits is not None
        prices = _prices(svc, lease.model)
        new = check_dead(lease.limits, _round(store, lease), req.entries, prices, _cut_evidence(store, lease))
        _books(store).book_interrupted(
            _step_of(lease),
            [
                DeadTokens(e.attempt, LOST if e.kind == "lost" else KEPT, e.tokens, generated_cost(prices, e.tokens))
                for e in new
            ],
        )

    await _call(svc, node_id, node_secret, req.lease_id, run)


class NoLease(Exception):
    def __init__(self, node_id: str) -> None:
        super().__init__(
            f"node {node_id!r} holds no such lease; it may read and book only the step the pool leased"
            " to it, while it holds the lease"
        )


def _books(store: Store) -> StoreStepBooks:
    return StoreStepBooks(store.checkpoints, store.tasks, store.events, store.ledger)


def _step_of(lease: LeaseRecord) -> StepRef:
    return StepRef(lease.task_id, lease.step, lease.model, lease.tenant, lease.lease_id)


def _round(store: Store, lease: LeaseRecord) -> Round:
    assert lease.limits is not None
    return Round(
        _entries(store, lease),
        store.leases.prepared_attempts(lease.task_id, lease.step, lease.limits.round_first_attempt),
    )


def _cut_evidence(store: Store, lease: LeaseRecord) -> CutEvidence:
    """What the lease's step was seen to lose to cuts (the workflow's events of them), and what it booked as dead."""
    seen = 0
    for event in store.events.of_kind(lease.task_id, KIND_OF[Interruption]):
        data = parse_event(event).data
        if isinstance(data, Interruption) and data.step == lease.step:
            seen += data.tokens_kept + data.tokens_lost
    for event in store.events.of_kind(lease.task_id, KIND_OF[GenerationQuiet]):
        data = parse_event(event).data
        if isinstance(data, GenerationQuiet) and data.step == lease.step:
            seen += data.tokens_carried
    dead = sum(
        e.completion_tokens for e in store.ledger.round_entries(lease.task_id, lease.step, 1) if e.kind in (LOST, KEPT)
    )
    return CutEvidence(seen=seen, booked=dead)


def _entries(store: Store, lease: LeaseRecord) -> list[LedgerEntry]:
    assert lease.limits is not None
    return store.ledger.round_entries(lease.task_id, lease.step, lease.limits.round_first_attempt)


def _prices(svc: Services, model: str) -> Prices | None:
    entry = svc.catalogue.get(model)
    return Prices.per_million(entry.usd_per_1m_prompt, entry.usd_per_1m_completion) if entry is not None else None


def _tokenizer(svc: Services, model: str) -> ModelTokenizer | None:
    """The model's own tokenizer (exact counts), or None for one counted by litellm's formula. A model whose
    tokenizer cannot be read cannot be counted as its engine counts, so its steps are refused, naming the file:
    for now (503, the node retries) when the origin stopped sending it, for good (422) when the file is unusable."""
    try:
        return tokenizers_under(svc.config.data_dir).for_entry(svc.catalogue.get(model))
    except TokenizerUnreadable as exc:
        raise ApiError(
            503 if exc.transient else 422,
            f"model {model!r} cannot be counted with its own tokenizer: {exc}",
            field="model",
        ) from None


def _prompt_of(
    store: Store, lease: LeaseRecord, conversation: list[Message], req: PrepareStepRequest
) -> tuple[list[dict], list[dict] | None]:
    """The prompt the call sends, as far as the control plane can vouch for it: the task's conversation, and the
    call's own instructions and tools when they hash to what the workflow put in the lease (an own loop offers
    other tools each call). A lease from before calls carried them counts the agent's tools."""
    messages = [m.to_openai() for m in conversation]
    assert lease.limits is not None
    if lease.limits.call_extras is None:
        return messages, sendable_tools(_tools_of(store, lease.task_id)) or None
    if call_extras_digest(req.instructions, req.tools) != lease.limits.call_extras:
        raise ApiError(
            409,
            f"the instructions and tools sent are not those of step {lease.step} of task {lease.task_id!r}'s call",
            field="tools",
        )
    if req.instructions:
        messages.insert(0, {"role": "system", "content": req.instructions})
    return messages, sendable_tools(req.tools) or None


def _tools_of(store: Store, task_id: str) -> list[dict]:
    """The tool schemas the task's agent offers the model: part of the prompt the control plane counts."""
    record = store.tasks.get(task_id)
    agent = store.agents.get(record.state.agent, record.state.agent_version) if record is not None else None
    return [t.to_openai() for t in tools_offered(agent)] if agent is not None else []


async def _call(
    svc: Services, node_id: str, node_secret: str | None, lease_id: str, fn: Callable[[LeaseRecord, Store], T]
) -> T:
    """Authenticate the node, find the lease it names and holds, then run `fn` over the store: one thread hop
    and one transaction, so that a call's writes (a ledger row and its event) land together or not at all;
    refusals in the API's shape."""

    def run() -> T:
        with svc.store.transaction() as store:
            store.fleet.authenticate(node_id, node_secret)
            lease = store.leases.get(lease_id)
            if lease is None or lease.node_id != node_id or lease.limits is None:
                raise NoLease(node_id)
            return fn(lease, store)

    try:
        return await svc.db(run)
    except CheckpointNotFound as exc:
        raise not_found(exc.message, field="checkpoint") from None
    except NotFound as exc:
        raise not_found(exc.message, field=exc.field or "node_id") from None
    except Unauthorized as exc:
        raise ApiError(exc.status_code or 401, exc.message, field=exc.field) from None  # 403: a pending node
    except (CheckpointConflict, CheckpointCorrupt) as exc:
        raise conflict(str(exc), field="checkpoint") from None
    except NoLease as exc:
        raise ApiError(403, str(exc), field="lease_id") from None
    except BookingRefused as exc:
        raise invalid(exc.field, exc.message) from None
