"""What a task looks like from outside: its status, spend and result."""

from __future__ import annotations

from datetime import datetime
from enum import Enum
from typing import Literal

from pydantic import BaseModel, Field, FiniteFloat


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
    question: str | None = None
    parent_task_id: str | None = None
    children: list[str] = Field(default_factory=list)
    started_at: datetime | None = None
    updated_at: datetime | None = None


class TaskEvent(BaseModel):
    """One entry of a task's event stream (steps, usage, state changes), in order by `seq`."""

    seq: int
    task_id: str
    kind: str  # "state" | "step" | "llm_call" | "tool_call" | "checkpoint" | "child"
    at: datetime
    data: dict = Field(default_factory=dict)
