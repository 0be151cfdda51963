"""The task workflow's input: what the API starts a task with, and what a continue-as-new carries on.

Only the control plane and the workflow read it; an agent author submits a TaskSpec and never builds one.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from .._spec import AgentSpec, CheckpointRef, ForkSource, TaskSpec
from .objectives import LatencyObjectives
from .own_loop import LoopProgress

# The version of the workflow code's rules a new run starts under (workflows/code_versions.py says what each
# one changed); a run's version never changes, a continue-as-new starts the next run on the current one.
CURRENT_WORKFLOW_VERSION = 1


class TaskRun(BaseModel):
    """The workflow's input: a validated spec with its agent resolved, plus where to resume from.

    Continue-as-new and forks pass `resume_from`; the conversation itself stays in the
    checkpoint store and only its reference travels through Temporal history.
    """

    task_id: str
    spec: TaskSpec
    agent: AgentSpec
    parent_task_id: str | None = None
    submitted_at: datetime
    budget_grace_s: float = 3600.0
    heartbeat_timeout_s: float = Field(
        default=5.0, ge=2, le=60, description="a generation silent this long has lost its node"
    )
    resume_from: CheckpointRef | None = None
    carried: CarriedProgress | None = None
    fork_of: ForkSource | None = None
    # The model's route takes a JSON-schema response format: an agent with an output schema asks for it
    # (else its answers are checked and repaired only).
    output_format_native: bool = False
    # Which rules of the workflow code this run follows: 0 for runs started before versions existed (a missing
    # field), CURRENT_WORKFLOW_VERSION for a run started now. Fixed in the run's first event, it decides a
    # change's branch the same way live and on replay.
    workflow_version: int = Field(default=0, ge=0, le=CURRENT_WORKFLOW_VERSION)
    # The task's latency objectives, resolved once at submission (its class's defaults under its tenant's, its
    # agent's and its own settings): every lease of the run carries them to the pool, and a sub-agent, working for
    # whoever waits on its parent, inherits them. None in runs started before tasks carried them: the pool then
    # reads the service class's defaults. Only payloads carry it, so it changes no command (workflow-changes.md).
    objectives: LatencyObjectives | None = None


class CarriedProgress(BaseModel):
    """Counters that survive continue-as-new (everything else is rebuilt from the checkpoint)."""

    tokens_used: int = 0
    usd_used: float = 0.0
    steps_done: int = 0
    interruptions: int = 0
    children: list[str] = Field(default_factory=list)
    token_limit: int = 0
    usd_limit: float | None = None
    tokens_lost: int = 0
    # Placements the next step already used in earlier rounds (it waited for budget, then the run continued as
    # new): its attempt numbers go on from there, so no ledger key of the step is used twice.
    placements_of_next_step: int = 0
    own_loop: LoopProgress | None = None  # an own loop's transcript, replies and tool results


TaskRun.model_rebuild()
