"""Inputs and outputs of Berth's activities.

Activities take one input model so their signatures can grow without breaking running
workflows. These models travel through Temporal history, so they carry ids, counters and
the newest messages only; whole conversations stay in the checkpoint store.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, ValidationError

from .._messages import Message, ToolCall
from .._spec import AgentSpec, CheckpointRef
from .._state import TaskState
from .lease import LeaseGrant, LeaseRequest, StepPlacement
from .limits import (
    MAX_ATTEMPTS_CARRIED,
    MAX_INPUT_CHARS,
    MAX_PREFIX_CHARS,
    MAX_TOKEN_BUDGET,
    MAX_USD_BUDGET,
    StoredInt,
    numbers_not_booleans,
)
from .reserve import TokenAllowance
from .task_run import TaskRun

TOOL_ACTIVITY = "berth.run_tool"
GENERATE_ACTIVITY = "berth.generate"  # a step's generation, on a node's queue (its heartbeats carry the text so far)
# The control queue's activities, by the names workflows call them (they never import an activity).
BEGIN_TASK_ACTIVITY = "berth.begin_task"
CHECKPOINT_ACTIVITY = "berth.checkpoint"
RECORD_STATE_ACTIVITY = "berth.record_state"
RESOLVE_AGENT_ACTIVITY = "berth.resolve_agent"
TOOL_WORKERS_ACTIVITY = "berth.tool_workers"
# The error types a generation fails with that the workflow acts on.
REPLICA_UNAVAILABLE = "ReplicaUnavailable"  # the error type a workflow re-places a step on
NODE_STOPPING = "NodeStopping"  # the node was told to leave while the step generated: re-place it elsewhere
GENERATION_CUT = "GenerationCut"  # the workflow cancelled the generation (a simulated preemption)
CONTROL_TASK_QUEUE = "berth-control"


class BeginTaskInput(BaseModel):
    run: TaskRun


class BeginTaskResult(BaseModel):
    checkpoint: CheckpointRef
    step: int


class PendingStep(BaseModel):
    """A finished step not yet in the checkpoint store.

    The next activity of the task writes it before anything else (the next LLM call, or the
    final flush), so a step costs one Temporal round trip instead of two; until then its
    messages are safe in workflow history.
    """

    step: StoredInt
    new_messages: list[Message]
    state: TaskState


class UnresolvedAttempt(BaseModel):
    """A dead attempt whose tokens are lost, or replayed to a later attempt: known once that one's reply id is."""

    attempt: StoredInt = Field(ge=1)
    generated: StoredInt = Field(ge=0)
    response_id: str | None = Field(default=None, max_length=256)


class GenerationProgress(BaseModel):
    """What a generation has done so far, as its heartbeats carry it (and an interruption's failure after them).

    Temporal retries a dead attempt with its input unchanged, so these heartbeats are all one attempt knows of the
    ones before it (attempts.py). A node sends them, so every number is bounded and the workflow books
    from them only within the lease's limits.
    """

    attempt: StoredInt = Field(ge=1)
    generated: StoredInt = Field(default=0, ge=0, description="tokens this attempt has streamed")
    response_id: str | None = Field(default=None, max_length=256, description="the engine's reply id, once known")
    lost_before: StoredInt = Field(default=0, ge=0, description="dead attempts' tokens nobody received")
    kept_before: StoredInt = Field(default=0, ge=0, description="dead attempts' tokens this one continues")
    unresolved: list[UnresolvedAttempt] = Field(default_factory=list, max_length=MAX_ATTEMPTS_CARRIED)
    prefix: str = Field(default="", max_length=MAX_PREFIX_CHARS, description="the reply's text so far, continuable")
    prefix_tokens: StoredInt = Field(default=0, ge=0, description="the tokens of `prefix`")
    prefix_own: StoredInt = Field(default=0, ge=0, description="of those, written by this attempt")

    @classmethod
    def from_details(cls, details: object) -> GenerationProgress | None:
        """The progress a generation's heartbeat (or its failure's details) carries: the first detail, unless
        there is none or it is not progress at all (a node may send anything). The one parser of it: the
        generate activity resumes from it, the workflow reads an interruption's."""
        if not isinstance(details, (list, tuple)) or not details:
            return None
        try:
            return cls.model_validate(details[0])
        except ValidationError:
            return None


class LlmStepInput(BaseModel):
    task_id: str
    step: int
    checkpoint: CheckpointRef
    pending: PendingStep | None = None
    model: str
    max_tokens: int
    token_allowance: TokenAllowance
    usd_allowance: float | None = None
    tools: list[dict] = Field(default_factory=list, description="OpenAI tool schemas offered to the model")
    settings: dict[str, Any] = Field(default_factory=dict, description="the set ModelSettings, as the call sends them")
    instructions: str | None = Field(
        default=None,
        max_length=MAX_INPUT_CHARS,
        description="a system prompt before the conversation (an own loop's, per call)",
    )
    tenant: str = "default"
    placement: StepPlacement | None = Field(default=None, description="the leased replica, when the fleet serves it")
    attempt_base: int = Field(default=0, ge=0, description="attempts earlier placements of this step may have used")
    inherited_progress: GenerationProgress | None = Field(
        default=None, description="the last heartbeat of this step's generation that an interruption cut off"
    )


class Reply(BaseModel):
    """The model answered: its message and real usage, with what dead attempts before it cost."""

    outcome: Literal["reply"] = "reply"
    message: Message
    finish_reason: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    lost_tokens: int = Field(default=0, description="generated by earlier attempts that died before settling")
    kept_tokens: int = Field(default=0, description="generated by earlier attempts that died, continued from here")
    cost_usd: float = 0.0
    ttft_s: float = 0.0
    duration_s: float = 0.0
    attempt: int = 1
    served_by: str = ""
    checkpoint: CheckpointRef = Field(description="after writing the input's pending step")
    budget_limited: bool = Field(default=False, description="max_tokens was shrunk to fit the allowance")
    placement: StepPlacement | None = None

    @property
    def tokens_charged(self) -> int:
        return self.prompt_tokens + self.completion_tokens + self.lost_tokens + self.kept_tokens

    @property
    def tool_calls(self) -> list[ToolCall]:
        return list(self.message.tool_calls or [])


class Shortfall(BaseModel):
    """No call was made: the allowance cannot pay for the prompt and a minimum answer. Dead attempts may still
    have cost something, which is charged."""

    outcome: Literal["shortfall"] = "shortfall"
    shortfall_tokens: int = Field(ge=0, description="tokens missing for the call")
    shortfall_usd: float | None = Field(default=None, description="dollars missing, when dollars were the limit")
    lost_tokens: int = 0
    kept_tokens: int = 0
    cost_usd: float = 0.0
    attempt: int = 1
    checkpoint: CheckpointRef
    placement: StepPlacement | None = None

    @property
    def tokens_charged(self) -> int:
        return self.lost_tokens + self.kept_tokens


LlmStepResult = Annotated[Reply | Shortfall, Field(discriminator="outcome")]


class ToolCallInput(BaseModel):
    task_id: str
    step: int
    call_id: str
    name: str
    arguments: str

    @property
    def idempotency_key(self) -> str:
        return f"{self.task_id}/{self.step}/{self.call_id}"


class ToolCallResult(BaseModel):
    call_id: str
    ok: bool
    content: str


class CheckpointInput(BaseModel):
    task_id: str
    parent: CheckpointRef
    pending: PendingStep


class AcquireStep(BaseModel):
    """A step's first ask for a lease, with its predecessor to write first: one local activity, not two."""

    request: LeaseRequest
    predecessor: CheckpointInput


class Acquired(BaseModel):
    grant: LeaseGrant
    checkpoint: CheckpointRef  # the predecessor, written: the step's conversation from now on


class RecordStateInput(BaseModel):
    state: TaskState
    event: str = "state"
    details: dict | None = Field(default=None, description="the event's data beyond the state (an interruption's)")
    spec_json: str | None = Field(default=None, description="given when the task's row may not exist yet (sub-agents)")


class ResolveAgentInput(BaseModel):
    name: str
    tenant: str | None = Field(default=None, description="the spawning task's tenant: only agents it may use")


class ResolveAgentResult(BaseModel):
    agent: AgentSpec | None = None
    error: str | None = None


# Messages to a running AgentTaskWorkflow (workflow id = task id, queue CONTROL_TASK_QUEUE).
WORKFLOW_NAME = "AgentTaskWorkflow"
STATE_QUERY = "state"
RAISE_BUDGET_UPDATE = "raise_budget"
ANSWER_UPDATE = "answer"
CANCEL_SIGNAL = "cancel"
SIMULATE_PREEMPTION_SIGNAL = "simulate_preemption"  # cut the running (or next) generation off, as a lost node would
NODE_GONE_SIGNAL = "node_gone"  # a node was revoked or removed: cut a generation running there and place it elsewhere


class RaiseBudget(BaseModel):
    tokens: int = Field(default=0, ge=0, le=MAX_TOKEN_BUDGET, description="tokens to add to the limit")
    usd: float = Field(default=0.0, ge=0, le=MAX_USD_BUDGET, description="dollars to add to the limit")

    _numbers = numbers_not_booleans("tokens", "usd")


class HumanAnswer(BaseModel):
    text: str = Field(min_length=1, max_length=MAX_INPUT_CHARS)


SPAWN_UPDATE = "spawn"
# A sub-agent's budget grows only out of its parent's remainder: the parent's workflow carves it and then grants it
# to the child with this signal (the child's own raise_budget refuses: it is not the tree's account).
RAISE_CHILD_BUDGET_UPDATE = "raise_child_budget"
GRANT_BUDGET_SIGNAL = "grant_budget"


class RaiseChildBudget(BaseModel):
    child_task_id: str
    tokens: int = Field(default=0, ge=0, le=MAX_TOKEN_BUDGET)
    usd: float = Field(default=0.0, ge=0, le=MAX_USD_BUDGET)


class SpawnedChild(BaseModel):
    """A sub-agent started through the spawn update: its task id and the budget carved for it."""

    task_id: str
    tokens: int
    usd: float | None = None


class NodeGone(BaseModel):
    """A node the control plane no longer trusts (revoked, removed): the task's step must not stay on it."""

    node_id: str
    reason: str = "the node was revoked"


class CancelRequest(BaseModel):
    reason: str = "cancelled by request"
