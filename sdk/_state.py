"""What a task looks like from outside: its status, spend and result."""

from __future__ import annotations

from datetime import datetime
from enum import Enum
from typing import Literal

from pydantic import BaseModel, Field, FiniteFloat

from .wire.objectives import LatencyObjectives


class TaskStatus(str, Enum):
    queued = "queued"
    running = "running"
    waiting_for_gpu = "waiting_for_gpu"
    awaiting_budget = "awaiting_budget"
    awaiting_input = "awaiting_input"
    completed = "completed"
    failed = "failed"
    cancelled = "cancelled"
    out_of_budget = "out_of_budget"
    max_steps = "max_steps"

    @property
    def is_final(self) -> bool:
        return self in FINAL_STATUSES


FINAL_STATUSES = frozenset(
    {TaskStatus.completed, TaskStatus.failed, TaskStatus.cancelled, TaskStatus.out_of_budget, TaskStatus.max_steps}
)


GpuTrouble = Literal["capacity", "preemption", "crash_loop"]


class Spend(BaseModel):
    """Tokens and dollars against their limits; `reserved_for_children` is carved out, not yet spent."""

    tokens_used: int = 0
    token_limit: int
    reserved_for_children: int = 0
    usd_used: FiniteFloat = 0.0
    usd_limit: FiniteFloat | None = None
    tokens_lost: int = 0

    @property
    def tokens_remaining(self) -> int:
        return self.token_limit - self.tokens_used - self.reserved_for_children


class Stuck(BaseModel):
    """Temporal cannot run the task's workflow code: its workflow task failed and is being retried without end (a
    nondeterminism error after a worker was upgraded, a bug in the workflow, a payload that cannot be decoded).

    Nothing of the task moves meanwhile: its status is the one it last had, and it stays that way until a worker
    runs its workflow task to the end again (a fixed worker deployed, or the workflow reset), when the control
    plane clears this. Set by the control plane, which watches Temporal for it; never by the workflow itself.
    """

    failures: int = Field(ge=1, description="attempts of its workflow task that have failed in a row")
    since: datetime = Field(description="when the first of those attempts failed (UTC)")
    error: str = Field(description="Temporal's record of why: the failure of the first failed attempt")
    cause: str | None = Field(
        default=None,
        description="Temporal's cause of the failure, e.g. `workflow_worker_unhandled_failure`,"
        " `non_deterministic_error`, or `timeout` (no worker finished the task in time)",
    )

    def describe(self) -> str:
        """One line for a person: "its workflow task has failed 7 times since 2026-12-05 21:01:32 UTC: <error>"."""
        times = "1 time" if self.failures == 1 else f"{self.failures} times"
        return f"its workflow task has failed {times} since {self.since:%Y-%m-%d %H:%M:%S} UTC: {self.error}"


class ToolCallToApprove(BaseModel):
    """A tool call of a task's own loop that waits for a person to approve or reject it."""

    call_id: str = Field(min_length=1, max_length=256)
    tool: str = Field(min_length=1, max_length=256)
    arguments: str = Field(default="", max_length=32_000, description="as the model wrote them (JSON)")


class TaskState(BaseModel):
    """The live state the workflow answers queries with, and the API stores on each change."""

    task_id: str
    agent: str
    agent_version: str
    model: str
    tenant: str
    status: TaskStatus
    step: int = 0
    max_steps: int
    spend: Spend
    checkpoint_seq: int | None = None
    interruptions: int = Field(default=0, description="node losses and preemptions the task rode out")
    result: str | None = None
    error: str | None = None
    waiting_for: str | None = Field(default=None, description="why the task is not running: budget, input, ...")
    gpu_trouble: GpuTrouble | None = Field(
        default=None,
        description="while a step cannot run on the fleet: `capacity` (no room now), `preemption`"
        " (its node went away; resuming elsewhere) or `crash_loop` (its replica keeps"
        " failing to load or to answer); `waiting_for` says where and why",
    )
    stuck: Stuck | None = Field(
        default=None,
        description="set while Temporal cannot run the task's workflow code: how often its workflow task has"
        " failed, since when, and why; `status` is then only what the task was doing when it got stuck",
    )
    question: str | None = None
    approvals: list[ToolCallToApprove] = Field(
        default_factory=list,
        description="while its own loop's tool calls wait for a person (`question` names them): approve or reject each",
    )
    parent_task_id: str | None = None
    children: list[str] = Field(default_factory=list)
    objectives: LatencyObjectives | None = Field(
        default=None,
        description="the latency objectives its model calls are placed by: its service class's defaults under its"
        " tenant's, its agent's and its own settings, resolved at submission (none for tasks from before)",
    )
    started_at: datetime | None = None
    updated_at: datetime | None = None


class TaskEvent(BaseModel):
    """One entry of a task's event stream (steps, usage, state changes), in order by `seq`, as the log stores it.

    `data` is the kind's fields as written; `sdk.wire.task_events.parse_event` reads it as the kind's model (a
    kind it does not know, as an `UnknownEvent`). `TaskHandle.stream()` yields the typed classes of the main kinds.
    """

    seq: int
    task_id: str
    kind: str  # "state", "step", "llm_call", "interruption", ...: the kinds of sdk/wire/task_events.py
    at: datetime
    data: dict = Field(default_factory=dict)
