"""The task's bookkeeping: start, checkpoints, state changes, agent look-ups.

These run as LOCAL activities in the orchestrator worker, next to the store: they are
small database writes that need no queue of their own, and a Temporal round trip for each
would cost more than the write (about 40 ms against about 1 ms).
"""

from __future__ import annotations

import contextlib

from temporalio import activity

from sdk import CheckpointRef, Message, TaskState
from sdk.wire.contracts import (
    BEGIN_TASK_ACTIVITY,
    CHECKPOINT_ACTIVITY,
    RECORD_STATE_ACTIVITY,
    RESOLVE_AGENT_ACTIVITY,
    BeginTaskInput,
    BeginTaskResult,
    CheckpointInput,
    RecordStateInput,
    ResolveAgentInput,
    ResolveAgentResult,
)
from sdk.wire.task_events import Interruption, recorded_data

from .step.ports import AgentCatalogue, CheckpointStore, EventLog, StepTransaction, TaskRegistry
from .step.spans import annotate_checkpoint, record_interruption
from .step.store_books import record_step
from .step.task_metrics import record_state_change, record_task_ended


class TaskBookkeeping:
    def __init__(
        self,
        checkpoints: CheckpointStore,
        tasks: TaskRegistry,
        events: EventLog,
        agents: AgentCatalogue,
        steps_in: StepTransaction | None = None,
    ) -> None:
        self.checkpoints = checkpoints
        self.tasks = tasks
        self.events = events
        self.agents = agents
        self._steps_in = steps_in or (lambda: contextlib.nullcontext(self))

    @activity.defn(name=BEGIN_TASK_ACTIVITY)
    def begin_task(self, inp: BeginTaskInput) -> BeginTaskResult:
        """Find or create the checkpoint the task starts from, and mark it running.

        Idempotent: a retried call finds the checkpoint the first call wrote.
        """
        run = inp.run
        if run.resume_from is not None:
            ref = run.resume_from
        elif (existing := self.checkpoints.latest(run.task_id)) is not None:
            ref = existing
        elif run.fork_of is not None:
            ref = self.checkpoints.fork(run.fork_of.task_id, run.fork_of.checkpoint_seq, run.task_id, {"forked": True})
        else:
            messages = []
            if run.agent.instructions:
                messages.append(Message(role="system", content=run.agent.instructions))
            messages.append(Message(role="user", content=run.spec.input))
            ref = self.checkpoints.write_root(run.task_id, messages, {"agent": run.agent.name})
        return BeginTaskResult(checkpoint=ref, step=ref.step)

    @activity.defn(name=CHECKPOINT_ACTIVITY)
    def checkpoint(self, inp: CheckpointInput) -> CheckpointRef:
        """Flush a pending step when no LLM call follows it (the task ends or continues as new)."""
        with self._steps_in() as records:
            ref = record_step(records, inp.task_id, inp.parent, inp.pending)
        annotate_checkpoint(inp.task_id, ref)
        return ref

    @activity.defn(name=RECORD_STATE_ACTIVITY)
    def record_state(self, inp: RecordStateInput) -> None:
        """Store the task's state and the event the workflow sent with it. The workflow's details are a dict (its
        history holds them so): the event is checked against its kind's model before anything is written, and
        a detail that does not fit fails the activity, naming the field, rather than reaching the log."""
        data = event_data(inp)
        recorded = recorded_data(inp.event, data)
        ended = self.tasks.save_state(inp.state, spec_json=inp.spec_json)
        self.events.append(inp.state.task_id, inp.event, data)  # as sent: the stored JSON keeps its shape
        record_state_change(inp.state, recorded)
        if ended:  # this write ended the task: a retry of it, or a replay's, finds it final and counts nothing
            record_task_ended(inp.state)
        if isinstance(recorded, Interruption):
            record_interruption(recorded)

    @activity.defn(name=RESOLVE_AGENT_ACTIVITY)
    def resolve_agent(self, inp: ResolveAgentInput) -> ResolveAgentResult:
        agent = self.agents.get(inp.name, visible_to=inp.tenant)
        if agent is None:
            return ResolveAgentResult(error=f"no agent named {inp.name!r} is registered")
        return ResolveAgentResult(agent=agent)


def event_data(inp: RecordStateInput) -> dict:
    """The data of the event `record_state` stores: the task's state, and the workflow's details over it."""
    return {**_state_event(inp.state), **(inp.details or {})}


def _state_event(state: TaskState) -> dict:
    data = {
        "status": state.status.value,
        "step": state.step,
        "tokens_used": state.spend.tokens_used,
        "token_limit": state.spend.token_limit,
        "waiting_for": state.waiting_for,
    }
    if state.gpu_trouble:
        data["gpu_trouble"] = state.gpu_trouble
    if state.status.is_final:
        data["result"] = state.result
        data["error"] = state.error
    if state.question:
        data["question"] = state.question
    return data
