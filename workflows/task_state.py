"""A task's live state as one value: what AgentTaskWorkflow knows between two events of its history.

Every phase of a step reads it and changes it (workflows/step_outcomes.py, own_loop_rules.py), the queries read
it, and continue-as-new carries what must outlive the run (`continuation`) in the run's input, TaskRun, whose
field names old histories hold. It is a pydantic model so that a test can build one, hand it to a phase and read
the phase's verdict from it with no Temporal server; nothing writes it whole to history (only TaskRun, TaskState
and the activities' inputs are payloads), so its own field names are free to change.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from sdk import CheckpointRef, GpuTrouble, Message, TaskState, TaskStatus
from sdk.wire.contracts import PendingStep
from sdk.wire.own_loop import LoopProgress
from sdk.wire.task_run import CURRENT_WORKFLOW_VERSION, CarriedProgress, TaskRun

from . import loop_record
from .budget import TokenBudget

# How a task ends: its final status, and the error (or reason) that goes with it.
Ending = tuple[TaskStatus, str | None]


class TaskRunState(BaseModel):
    """What the task knows now; the run's input (TaskRun) is the rest, and never changes."""

    budget: TokenBudget
    status: TaskStatus = TaskStatus.queued
    steps_done: int = 0
    # Sub-agents started, across runs (SubAgents appends to this very list).
    children: list[str] = Field(default_factory=list)
    checkpoint: CheckpointRef | None = None
    pending: PendingStep | None = None  # the last finished step, until the next activity writes it
    result: str | None = None
    error: str | None = None
    waiting_for: str | None = None
    gpu_trouble: GpuTrouble | None = None
    question: str | None = None
    answer_text: str | None = None  # a person's answer to `question`, until the step takes it
    cancel_reason: str | None = None
    budget_raised: bool = False  # a raise (or a parent's grant) arrived since the task last waited for one
    finishing: bool = False  # no new sub-agent from here: the task is ending
    output_repairs: int = 0  # repair steps asked for so far (an answer that did not match the output schema)
    repairing: bool = False  # the next step is one of them
    # ----- an own loop (the author's): None for Berth's loop
    own_loop: LoopProgress | None = None  # its transcript, replies and tool results (carried over continue-as-new)
    loop_finished: tuple[str | None, str | None] | None = None  # (output, error) once the loop says it is done
    loop_last_call_at: float | None = None  # workflow time of the loop's last call (its silence is bounded)
    loop_wakeups: int = 0  # bumped by each call and by the loop's finish: the task re-reads its reasons to end
    loop_over: Ending | None = None  # a call found the task must end
    short_since: float | None = None  # a call found the budget short (workflow time)


def begin(run: TaskRun) -> TaskRunState:
    """The state a run starts in: fresh, or what the previous run carried over (continue-as-new)."""
    carried = run.carried
    own_loop = None
    if run.agent.loop == "own":
        own_loop = carried.own_loop if carried else None
        if own_loop is None:  # the conversation starts from the task's input
            own_loop = loop_record.opening([Message(role="user", content=run.spec.input)])
    return TaskRunState(
        budget=TokenBudget(
            token_limit=carried.token_limit if carried else run.spec.budget.tokens,
            usd_limit=carried.usd_limit if carried else run.spec.budget.usd,
            tokens_used=carried.tokens_used if carried else 0,
            tokens_lost=carried.tokens_lost if carried else 0,
            usd_used=carried.usd_used if carried else 0.0,
        ),
        steps_done=carried.steps_done if carried else 0,
        children=list(carried.children) if carried else [],
        checkpoint=run.resume_from,
        own_loop=own_loop,
    )


def snapshot(run: TaskRun, state: TaskRunState, interruptions: int, now: datetime) -> TaskState:
    """The task as its state query, its stored row and a step's checkpoint show it."""
    agent = run.agent
    approvals = state.own_loop.approvals if state.own_loop is not None else None
    return TaskState(
        task_id=run.task_id,
        agent=agent.name,
        agent_version=agent.version,
        model=agent.model,
        tenant=run.spec.tenant,
        status=state.status,
        step=state.steps_done,
        max_steps=agent.max_steps,
        spend=state.budget.spend(),
        checkpoint_seq=state.checkpoint.seq if state.checkpoint else None,
        interruptions=interruptions,
        result=state.result,
        error=state.error,
        waiting_for=state.waiting_for,
        gpu_trouble=state.gpu_trouble,
        question=state.question,
        approvals=approvals.waiting if approvals is not None else [],
        parent_task_id=run.parent_task_id,
        children=list(state.children),
        objectives=run.objectives,
        started_at=run.submitted_at,
        updated_at=now,
    )


def continuation(run: TaskRun, state: TaskRunState, interruptions: int, placements_of_next_step: int) -> TaskRun:
    """The input of the next run: the same task, resumed from its last checkpoint."""
    b = state.budget
    return run.model_copy(
        update={
            "resume_from": state.checkpoint,
            "fork_of": None,
            "workflow_version": CURRENT_WORKFLOW_VERSION,  # the next run follows this build's rules
            "carried": CarriedProgress(
                tokens_used=b.tokens_used,
                usd_used=b.usd_used,
                steps_done=state.steps_done,
                interruptions=interruptions,
                children=state.children,
                token_limit=b.token_limit,
                usd_limit=b.usd_limit,
                tokens_lost=b.tokens_lost,
                placements_of_next_step=placements_of_next_step,
                own_loop=state.own_loop,
            ),
        }
    )
