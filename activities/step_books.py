"""The LLM step's bookkeeping over the store's ports, for activities that run beside the store.

A GPU node has no database and does the same through the control plane's HTTP API
(orchestrator/node/step_books.py), whose routes call this class; so both paths write alike.
"""

from __future__ import annotations

from sdk import CheckpointRef
from sdk.contracts import PendingStep

from .ports import SETTLED, CheckpointStore, EventLog, LedgerEntry, PreparedStep, TaskRegistry, TokenLedger
from .step_metrics import record_settled_call


class StoreStepBooks:
    """Implements ports.StepBooks with the checkpoint store, task registry, event log and ledger."""

    def __init__(self, checkpoints: CheckpointStore, tasks: TaskRegistry, events: EventLog, ledger: TokenLedger) -> None:
        self.checkpoints = checkpoints
        self.tasks = tasks
        self.events = events
        self.ledger = ledger

    def prepare(self, task_id: str, checkpoint: CheckpointRef, pending: PendingStep | None) -> PreparedStep:
        if pending is not None:
            checkpoint = record_step(self.checkpoints, self.tasks, self.events, task_id, checkpoint, pending)
        return PreparedStep(checkpoint=checkpoint, messages=self.checkpoints.read(checkpoint.id).messages)

    def settle(self, entry: LedgerEntry, event: dict) -> bool:
        """A retried settle neither re-books, re-announces nor re-counts: the ledger's key (task, step, attempt)
        holds. The event's "tenant" labels the booked tokens and cost."""
        if not self.ledger.record(entry):
            return False
        self.events.append(entry.task_id, "llm_call", event)
        record_settled_call(entry, str(event.get("tenant", "")))
        return True

    def booked(self, task_id: str, step: int, before_attempt: int) -> list[LedgerEntry]:
        return [e for e in self.ledger.entries(task_id)
                if e.step == step and e.kind == SETTLED and e.attempt < before_attempt]

    def book_interrupted(self, entries: list[LedgerEntry]) -> None:
        for entry in entries:
            self.ledger.record(entry)


def record_step(checkpoints: CheckpointStore, tasks: TaskRegistry, events: EventLog, task_id: str,
                parent: CheckpointRef, pending: PendingStep) -> CheckpointRef:
    """Write a finished step: append its messages to the checkpoint chain, list the task's progress,
    announce a "step" event. Idempotent, so retries are harmless."""
    spend = pending.state.spend
    already = checkpoints.find(task_id, parent.seq + 1)
    ref = checkpoints.append(task_id, parent, pending.step, pending.new_messages, {},
                             {"spend": spend.model_dump(), "step": pending.step})
    if already is not None:
        # An earlier attempt wrote it (its reply was lost with its node, and the step was placed again):
        # the step is recorded and announced once.
        return ref
    tasks.save_state(pending.state.model_copy(update={"checkpoint_seq": ref.seq}))
    events.append(task_id, "step", {
        "step": pending.step, "checkpoint_seq": ref.seq, "tokens_used": spend.tokens_used,
        "token_limit": spend.token_limit, "usd_used": spend.usd_used,
        "tool_calls": [c.name for m in pending.new_messages for c in (m.tool_calls or [])],
    })
    return ref
