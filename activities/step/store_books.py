"""The LLM step's bookkeeping over the store's ports, for activities that run beside the store.

A GPU node has no database and does the same through the control plane's HTTP API
(orchestrator/node/step_books.py), whose routes check the node's lease and bound its figures,
then call this class; so both paths write alike, and every "llm_call" event has one shape.
"""

from __future__ import annotations

import contextlib
from typing import Any

from sdk import CheckpointRef
from sdk.wire.contracts import PendingStep
from sdk.wire.ledger import SETTLED, DeadTokens, LedgerEntry
from sdk.wire.step_books import LlmCallEvent
from sdk.wire.step_call import CallReport, PreparedStep, Settled, StepRef
from sdk.wire.task_events import ModelCallEvent, StepRecorded, StepRecordedEvent

from .call_metrics import record_settled_call
from .ports import CheckpointStore, EventLog, StepRecords, StepTransaction, TaskRegistry, TokenLedger
from .task_metrics import record_task_ended
from .tool_metrics import record_tool_calls


class CheckpointOfAnotherTask(ValueError):
    """A step named a checkpoint that is not its task's: its conversation must not be read for it."""


class StoreStepBooks:
    """Implements ports.StepBooks with the checkpoint store, task registry, event log and ledger."""

    def __init__(
        self,
        checkpoints: CheckpointStore,
        tasks: TaskRegistry,
        events: EventLog,
        ledger: TokenLedger,
        steps_in: StepTransaction | None = None,
    ) -> None:
        self.checkpoints = checkpoints
        self.tasks = tasks
        self.events = events
        self.ledger = ledger
        self._steps_in = steps_in or (lambda: contextlib.nullcontext(self))

    def prepare(
        self,
        step: StepRef,
        checkpoint: CheckpointRef,
        pending: PendingStep | None,
        instructions: str | None = None,
        tools: list[dict[str, Any]] | None = None,
        *,
        attempt: int = 1,
    ) -> PreparedStep:
        """The control queue's step counts its own prompt (`plan_call`): no reservation, so no extras to count and no
        attempt to record."""
        if pending is not None:
            with self._steps_in() as records:
                checkpoint = record_step(records, step.task_id, checkpoint, pending)
        content = self.checkpoints.read(checkpoint.id)
        if content.task_id != step.task_id or content.ref.hash != checkpoint.hash:
            raise CheckpointOfAnotherTask(f"checkpoint {checkpoint.id} is not one of task {step.task_id!r}'s")
        return PreparedStep(checkpoint=content.ref, messages=content.messages)

    def settle(self, step: StepRef, call: CallReport) -> Settled:
        """A retried settle neither re-books, re-announces nor re-counts: the ledger's key (task, step, attempt)
        holds."""
        entry = settled_entry(step, call)
        if not self.ledger.record(entry):
            return Settled(recorded=False, cost_usd=call.cost_usd)
        self.events.append(step.task_id, ModelCallEvent.KIND, llm_call_event(step, call).data())
        record_settled_call(entry, step.tenant)
        return Settled(recorded=True, cost_usd=call.cost_usd)

    def booked(self, step: StepRef, before_attempt: int) -> list[LedgerEntry]:
        return [
            e
            for e in self.ledger.entries(step.task_id)
            if e.step == step.step and e.kind == SETTLED and e.attempt < before_attempt
        ]

    def book_interrupted(self, step: StepRef, dead: list[DeadTokens]) -> None:
        for d in dead:
            self.ledger.record(
                LedgerEntry(
                    task_id=step.task_id,
                    step=step.step,
                    attempt=d.attempt,
                    model=step.model,
                    prompt_tokens=0,
                    completion_tokens=d.tokens,
                    cost_usd=d.cost_usd,
                    ttft_s=0.0,
                    duration_s=0.0,
                    served_by="",
                    kind=d.kind,
                )
            )


def settled_entry(step: StepRef, call: CallReport) -> LedgerEntry:
    return LedgerEntry(
        task_id=step.task_id,
        step=step.step,
        attempt=call.attempt,
        model=step.model,
        prompt_tokens=call.prompt_tokens,
        completion_tokens=call.completion_tokens,
        cost_usd=call.cost_usd,
        ttft_s=call.ttft_s,
        duration_s=call.duration_s,
        served_by=call.served_by,
        response_id=call.response_id,
    )


def llm_call_event(step: StepRef, call: CallReport) -> LlmCallEvent:
    """The call's event: the ledger's figures, where it ran and what it waited for."""
    placement = call.placement
    return LlmCallEvent(
        step=step.step,
        attempt=call.attempt,
        model=step.model,
        tenant=step.tenant,
        prompt_tokens=call.prompt_tokens,
        completion_tokens=call.completion_tokens,
        lost_tokens=call.lost_tokens,
        kept_tokens=call.kept_tokens,
        continued_tokens=call.continued_tokens,
        cost_usd=call.cost_usd,
        ttft_s=round(call.ttft_s, 4),
        duration_s=round(call.duration_s, 4),
        tokens_per_s=round(call.completion_tokens / call.duration_s, 1) if call.duration_s > 0 else None,
        served_by=call.served_by,
        finish_reason=call.finish_reason,
        tool_calls=list(call.tool_calls),
        **(placement.model_dump(exclude={"lease_id"}) if placement is not None else {}),
    )


def record_step(records: StepRecords, task_id: str, parent: CheckpointRef, pending: PendingStep) -> CheckpointRef:
    """Write a finished step: append its messages to the checkpoint chain, list the task's progress,
    announce a "step" event (in one transaction when `records` are bound to one). Idempotent, so retries
    are harmless. Only code beside the store (the workflow's own activities) calls this: a GPU node never
    writes a task's state."""
    spend = pending.state.spend
    already = records.checkpoints.find(task_id, parent.seq + 1)
    ref = records.checkpoints.append(
        task_id, parent, pending.step, pending.new_messages, {}, {"spend": spend.model_dump(), "step": pending.step}
    )
    if already is not None and already.hash == ref.hash:
        # An earlier attempt wrote it (its reply was lost with its node, and the step was placed again):
        # the step is recorded and announced once.
        return ref
    state = pending.state.model_copy(update={"checkpoint_seq": ref.seq})
    if records.tasks.save_state(state):
        record_task_ended(state)
    if already is not None:
        return ref  # it replaced what a failed workflow task wrote for this step: announced by that one already
    record_tool_calls(state, pending.new_messages)
    step = StepRecorded(
        step=pending.step,
        checkpoint_seq=ref.seq,
        tokens_used=spend.tokens_used,
        token_limit=spend.token_limit,
        usd_used=spend.usd_used,
        tool_calls=[c.name for m in pending.new_messages for c in (m.tool_calls or [])],
    )
    records.events.append(task_id, StepRecordedEvent.KIND, step.model_dump(mode="json"))
    return ref
