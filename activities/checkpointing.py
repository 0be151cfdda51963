"""Writing a finished step: its checkpoint, the task's listed progress, and a step event."""

from __future__ import annotations

from sdk import CheckpointRef
from sdk.contracts import PendingStep

from .ports import CheckpointStore, EventLog, TaskRegistry


def record_step(checkpoints: CheckpointStore, tasks: TaskRegistry, events: EventLog, task_id: str,
                parent: CheckpointRef, pending: PendingStep) -> CheckpointRef:
    """Append the step's messages to the checkpoint chain; idempotent, so retries are harmless."""
    spend = pending.state.spend
    ref = checkpoints.append(task_id, parent, pending.step, pending.new_messages, {},
                             {"spend": spend.model_dump(), "step": pending.step})
    tasks.save_state(pending.state.model_copy(update={"checkpoint_seq": ref.seq}))
    events.append(task_id, "step", {
        "step": pending.step, "checkpoint_seq": ref.seq, "tokens_used": spend.tokens_used,
        "token_limit": spend.token_limit, "usd_used": spend.usd_used,
        "tool_calls": [c.name for m in pending.new_messages for c in (m.tool_calls or [])],
    })
    return ref
