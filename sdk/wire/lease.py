"""A step's worker lease: what the workflow asks the pool for, and what the pool answers.

A step asks before every model call. The pool answers with one of four outcomes, each its
own type (a union, so a caller matches on what it got instead of asserting optionals away):
- `Placed`: run on `node_id`'s queue against `replica_id`; when `load` is set the replica is
  not serving yet and the step first waits for it on that node (loads are idempotent per
  replica id, so every lease on a loading replica waits on the same load);
- `Wait`: nothing can serve now; `reason`, `wait_reason` and `queue_position` say why and
  where the task stands, and the step asks again;
- `Never`: no node of this fleet could ever serve it; the task fails with `reason`;
- `Direct`: the model is not served by the fleet (a hosted provider, or a stack run without
  GPU nodes), so the step calls it from the control queue without a lease.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, FiniteFloat, model_validator

from .limits import MAX_STORED_INT, MAX_TOKENS_PER_STEP, StoredInt
from .node_io import LoadReplica
from .reserve import TokenAllowance
from .transcript import digest

ServiceClass = Literal["interactive", "batch", "low_priority"]
LocalityTier = Literal["warm", "loading", "disk", "datacenter", "origin"]
WaitReason = Literal["no_capacity", "cold_start", "busy", "tenant_quota", "low_priority", "queued"]

ACQUIRE_LEASE = "berth.pool.acquire"
ACQUIRE_STEP = "berth.pool.acquire_step"  # a lease asked with the step's predecessor to write (sdk/wire/contracts.py)
RELEASE_LEASE = "berth.pool.release"
NODE_LIVENESS = "berth.pool.node_liveness"
BOOK_CUT = "berth.pool.book_cut"


class StepLimits(BaseModel):
    """What one placement of a step may spend, as its workflow (the budget's owner) sets it.

    The node the lease goes to books its call through the control plane, which bounds every number the node
    sends by these: its answer by `max_tokens`, everything the step's round books (this placement's call, and
    the tokens of attempts that died before it) by `token_allowance`, and the attempt numbers it books under by
    the placement's range. A node never sets them.
    """

    # Set by the workflow, never by a client: a budget raised again and again may pass what one submit may ask for,
    # so only the store's bound applies (a validation error here would stall the workflow).
    max_tokens: int = Field(ge=1, le=MAX_TOKENS_PER_STEP, description="the step's answer limit")
    token_allowance: TokenAllowance  # what the round (this placement's call and its dead attempts) may book
    usd_allowance: FiniteFloat | None = Field(default=None, ge=0, description="dollars, likewise")
    first_attempt: int = Field(default=1, ge=1, le=MAX_STORED_INT, description="this placement's attempt numbers")
    last_attempt: int = Field(default=MAX_STORED_INT, ge=1, le=MAX_STORED_INT)
    round_first_attempt: int = Field(
        default=1,
        ge=1,
        le=MAX_STORED_INT,
        description="the first attempt of the round this placement belongs to (a step asked again after waiting"
        " for budget starts a new round): attempts that died before it are booked from there on",
    )
    call_extras: str | None = Field(
        default=None,
        pattern=r"^[0-9a-f]{64}$",
        description="the digest of the call's own instructions and tool schemas (`call_extras_digest`): the node"
        " sends them with its prepare, and the control plane counts them in the prompt only when they hash to this"
        " (None: a lease from before calls carried them, whose prompt is the task's conversation and agent's tools)",
    )
    quiet_after_s: float | None = Field(
        default=None,
        ge=1,
        le=600,
        description="the heartbeat timeout after which the workflow continues a quiet generation on this placement:"
        " the control plane accepts a continuation's prepare no sooner (None: a lease from before it said, judged by"
        " the control plane's own `heartbeat_timeout_s`)",
    )


def call_extras_digest(instructions: str | None, tools: list[dict[str, Any]]) -> str:
    """sha256 of what a call sends the model beside the task's conversation. The workflow puts it in the lease's
    limits, so the prompt the control plane reserves for is the one the call sends (an own loop's tool schemas and
    instructions differ call by call), and a node cannot shrink that reservation by sending other extras."""
    return digest([instructions, tools])


class LeaseRequest(BaseModel):
    task_id: str
    step: int = Field(ge=1)
    model: str
    tokens: int = Field(
        ge=1,
        description="answer (completion) tokens this step may generate: its load on the replica, which placement"
        " weighs. Not its token allowance (`limits.token_allowance`, prompt included), which bounds what it books",
    )
    prompt_tokens: int = Field(
        default=0,
        ge=0,
        description="the step's prompt as far as the task knows it (what its"
        " previous step's prompt and answer held): prefix affinity"
        " and prefill time weigh it",
    )
    tenant: str = "default"
    priority: int = Field(default=0, ge=0, le=9, description="higher goes first in the wait queue")
    service_class: ServiceClass = "interactive"
    exclude_nodes: list[str] = Field(default_factory=list)
    avoid_spot_zones: list[str] = Field(
        default_factory=list,
        description="zones whose spot capacity was reclaimed under this step: their spot"
        " nodes are used only when nothing else can serve",
    )
    previous_replica: str | None = Field(default=None, description="served the previous step: prefix affinity")
    limits: StepLimits | None = Field(
        default=None, description="what the step may spend (default: `tokens`, no prompt, any attempt)"
    )
    objectives: LatencyObjectives | None = Field(
        default=None,
        description="what the task's calls promise, resolved at its submission (class, tenant, agent, task);"
        " None (a run started before tasks carried them): the service class's defaults",
    )

    @model_validator(mode="after")
    def _limits_default_to_the_load(self) -> LeaseRequest:
        if self.limits is None:
            self.limits = StepLimits(max_tokens=min(self.tokens, MAX_TOKENS_PER_STEP), token_allowance=self.tokens)
        return self


class Placed(BaseModel):
    """Run on `node_id`'s queue against `replica_id`; with `load`, wait for the replica's load first."""

    outcome: Literal["placed"] = "placed"
    lease_id: str
    node_id: str
    replica_id: str
    gpu_indexes: list[int] = Field(default_factory=list)
    gpu_type: str | None = None
    zone: str | None = None
    capacity: Literal["on-demand", "spot"] = "on-demand"
    tier: LocalityTier = "warm"
    load: LoadReplica | None = Field(default=None, description="set while the replica still has to be loaded")
    usd_per_1m_prompt: float | None = None
    usd_per_1m_completion: float | None = None
    expected_ttft_s: float | None = None
    decided_by: str | None = Field(default=None, description="the score term that chose this placement")

    @property
    def served_by(self) -> str:
        return f"{self.node_id}/{self.replica_id}"


class Wait(BaseModel):
    """Nothing can serve the step now: why, and the task's place in the model's queue (1 = next)."""

    outcome: Literal["wait"] = "wait"
    reason: str
    wait_reason: WaitReason
    queue_position: int = Field(ge=1)


class Never(BaseModel):
    """No node of this fleet could ever serve the step."""

    outcome: Literal["never"] = "never"
    reason: str


class Direct(BaseModel):
    """The fleet does not serve the model (a hosted provider, a stack without nodes): call it without a lease."""

    outcome: Literal["direct"] = "direct"
    reason: str


LeaseGrant = Annotated[Placed | Wait | Never | Direct, Field(discriminator="outcome")]


class NextStep(BaseModel):
    """What a served step's task does before its next step: the pool keeps or starts a replica for it."""

    kind: Literal["tool_calls", "spawn", "awaiting_input"]
    spawns: int = Field(default=0, ge=0, le=1000, description="sub-agents it starts (kind spawn)")


class StepRound(BaseModel):
    """A round of a step: its attempts from `first_attempt` on (a step asked again after waiting for budget starts
    a new round)."""

    task_id: str
    step: int = Field(ge=1)
    first_attempt: int = Field(ge=1)


class ReleaseLease(BaseModel):
    lease_id: str
    replica_warm: bool = Field(default=False, description="the step was served: the replica is warm now")
    replica_gone: bool = Field(default=False, description="the node no longer has the replica: stop placing on it")
    booked_round: StepRound | None = Field(default=None, description="answer with what the ledger booked for it")
    next_step: NextStep | None = Field(default=None, description="announces the task's next step on this model")


class BookedRound(BaseModel):
    """What the control plane booked for one round of a step (its attempts from one number on), whatever its
    nodes said: the workflow charges these figures, so a node that lies in its reply cannot move a budget."""

    settled_calls: StoredInt = 0
    prompt_tokens: StoredInt = 0
    completion_tokens: StoredInt = 0
    lost_tokens: StoredInt = 0
    kept_tokens: StoredInt = 0
    cost_usd: FiniteFloat = 0.0

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens + self.lost_tokens + self.kept_tokens


class StepPlacement(BaseModel):
    """Where a step ran and what it waited for, recorded with its model call (ledger event, UI timeline)."""

    lease_id: str = Field(default="", max_length=64, description="the lease the node books the step under")
    node_id: str = Field(max_length=128)
    replica_id: str = Field(max_length=128)
    gpu_indexes: list[Annotated[int, Field(ge=0, le=1023)]] = Field(max_length=64)
    gpu_type: str | None = Field(default=None, max_length=64)
    tier: LocalityTier
    decided_by: str | None = Field(default=None, max_length=32)
    queue_wait_s: FiniteFloat = Field(default=0.0, ge=0, le=1e9, description="from the first acquire to the lease")
    load_s: FiniteFloat = Field(default=0.0, ge=0, le=1e9, description="waiting for the replica to load")


class NodeLiveness(BaseModel):
    """What the evidence about a node says (orchestrator/pool/liveness.py), asked before a step is given up on it."""

    verdict: Literal["alive", "gone", "unknown"]
    detail: str


class CutGeneration(BaseModel):
    """A generation the task's cancellation cut off: what it had written is booked as lost, as the engine served
    it. `tokens` comes from the generation's last heartbeat, so the workflow bounds it by the step's answer limit."""

    task_id: str
    step: int = Field(ge=1)
    attempt: int = Field(ge=1, le=MAX_STORED_INT)
    model: str
    tokens: int = Field(ge=0, le=MAX_TOKENS_PER_STEP)
    usd_per_1m_completion: FiniteFloat | None = Field(default=None, ge=0)
    served_by: str = ""


# objectives.py types its defaults by this module's ServiceClass, so it is imported once this module's names exist
# (the `sdk` package imports this module before anything imports that one) and the request is completed with it.
from .objectives import LatencyObjectives  # noqa: E402

LeaseRequest.model_rebuild()
