"""The services activities need, as protocols.

The orchestrator hands concrete implementations (the sqlmodel store, the model catalogue)
to the activity classes' constructors, so activity code never imports the orchestrator and
a test can hand in anything with the same methods.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from sdk import AgentSpec, Message, TaskState
from sdk.wire.contracts import CheckpointRef, PendingStep
from sdk.wire.lease import LeaseGrant, LeaseRequest, NodeLiveness, ReleaseLease, StepPlacement

from .tokens import PromptTokenizer


@dataclass(frozen=True)
class CheckpointContent:
    """A checkpoint read back whole: the conversation up to it and the side state beside it."""

    ref: CheckpointRef
    task_id: str
    messages: list[Message]
    scratch: dict
    state: dict


SETTLED = "settled"  # a call's usage as its engine reported it
LOST = "lost"  # tokens an attempt generated before it died, that nobody received
KEPT = "kept"  # tokens an attempt generated before it died, that the step's reply went on from


@dataclass(frozen=True)
class LedgerEntry:
    """One LLM call's cost, keyed (task, step, attempt) so a retried write counts once."""

    task_id: str
    step: int
    attempt: int
    model: str
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    ttft_s: float
    duration_s: float
    served_by: str
    kind: str = "settled"  # SETTLED, LOST or KEPT (below)
    response_id: str = ""  # the engine's reply id, so a retry can tell a replay of a booked reply


@dataclass(frozen=True)
class ModelRoute:
    """How a step reaches a model: its litellm route string, base URL and key, and what it costs."""

    name: str
    litellm_model: str
    api_base: str | None
    api_key: str | None
    usd_per_1m_prompt: float | None
    usd_per_1m_completion: float | None
    served_by: str
    # The model's own prompt counting (its tokenizer and chat template) when it has real weights naming one;
    # None: counted as OpenAI counts (litellm), with the reservation margin for the difference.
    tokenizer: PromptTokenizer | None = None
    # Berth's own engines speak the OpenAI API: the step streams from them with a plain HTTP client
    # (activities/model_stream.py); hosted providers go through litellm, which knows each one's dialect.
    openai_compatible: bool = False


class CheckpointStore(Protocol):
    def write_root(self, task_id: str, messages: list[Message], state: dict) -> CheckpointRef: ...

    def append(
        self, task_id: str, parent: CheckpointRef, step: int, new_messages: list[Message], scratch: dict, state: dict
    ) -> CheckpointRef: ...

    def read(self, checkpoint_id: int) -> CheckpointContent: ...

    def find(self, task_id: str, seq: int) -> CheckpointRef | None: ...

    def latest(self, task_id: str) -> CheckpointRef | None: ...

    def fork(self, source_task_id: str, seq: int, new_task_id: str, state: dict) -> CheckpointRef: ...


class TokenLedger(Protocol):
    def record(self, entry: LedgerEntry) -> bool: ...

    def entries(self, task_id: str) -> list[LedgerEntry]: ...

    def round_entries(self, task_id: str, step: int, from_attempt: int) -> list[LedgerEntry]: ...


class TaskRegistry(Protocol):
    def save_state(self, state: TaskState, spec_json: str | None = None) -> None: ...


class EventLog(Protocol):
    def append(self, task_id: str, kind: str, data: dict) -> int: ...


class StepRecords(Protocol):
    """Where a finished step is written: its checkpoint, the task's state and the step's event."""

    @property
    def checkpoints(self) -> CheckpointStore: ...
    @property
    def tasks(self) -> TaskRegistry: ...
    @property
    def events(self) -> EventLog: ...


# A step's records in one transaction (the store's `transaction`): they land together, for one commit.
StepTransaction = Callable[[], AbstractContextManager[StepRecords]]


class AgentCatalogue(Protocol):
    def get(self, name: str, version: str | None = None, visible_to: str | None = None) -> AgentSpec | None: ...


class ReplicaUnavailable(Exception):
    """The step's leased replica no longer serves on this node (unloaded, node restarted)."""


class ModelRouter(Protocol):
    def route(self, model: str, placement: StepPlacement | None) -> ModelRoute:
        """How to reach `model`; `placement` is the leased replica when the fleet serves the step."""
        ...


@dataclass(frozen=True)
class StepRef:
    """The step a model call books under. `lease_id` is the lease a GPU node holds for it (None on the control
    queue, beside the store): the control plane checks every node's booking against that lease."""

    task_id: str
    step: int
    model: str
    tenant: str
    lease_id: str | None = None


@dataclass(frozen=True)
class PreparedStep:
    """What a step starts from: the checkpoint after its pending step, the conversation up to it, and (on the
    fleet) the answer tokens the control plane granted after counting that conversation itself."""

    checkpoint: CheckpointRef
    messages: list[Message]
    max_tokens: int | None = None


@dataclass(frozen=True)
class CallReport:
    """What a step saw of its one model call, for the ledger and the "llm_call" event.

    `prompt_tokens` is what the step is charged for: the engine's count, less the kept text a continuation
    re-sent (booked once already, as kept). `lost_tokens`/`kept_tokens` are the step's dead attempts', shown
    in the event; on the fleet the control plane takes them (and the cost) from its own books instead.
    """

    attempt: int
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    ttft_s: float
    duration_s: float
    served_by: str
    response_id: str = ""
    finish_reason: str | None = None
    tool_calls: tuple[str, ...] = ()
    lost_tokens: int = 0
    kept_tokens: int = 0
    continued_tokens: int = 0  # the kept text's tokens the engine counted in its prompt (not charged again)
    placement: StepPlacement | None = None


@dataclass(frozen=True)
class Settled:
    """A booked call as the books priced it: on the fleet the control plane's price, whatever the node said."""

    recorded: bool  # False: the attempt was booked already (a retried settle)
    cost_usd: float


@dataclass(frozen=True)
class DeadTokens:
    """Tokens an attempt generated before it died: LOST (nobody received them) or KEPT (the reply went on from
    them), priced at the completion rate."""

    attempt: int
    kind: str
    tokens: int
    cost_usd: float


class StepBooks(Protocol):
    """The LLM step's bookkeeping, in calls coarse enough to cross a network.

    On the control plane these are store calls (activities/step_books.py); on a GPU node,
    which has no database, they are HTTP calls to the control plane, so each method is one
    round trip and a normal step costs two (prepare, settle). There every call names the node's
    lease, and the control plane bounds what it books by that lease (orchestrator/api/steps.py).
    """

    def prepare(
        self,
        step: StepRef,
        checkpoint: CheckpointRef,
        pending: PendingStep | None,
        instructions: str | None = None,
        tools: list[dict[str, Any]] | None = None,
    ) -> PreparedStep:
        """Write `pending` (checkpoint, task state, step event) when given, then read the conversation.
        A node never writes: its step's predecessor was written beside the store before the lease. The call's
        own `instructions` and `tools` go with a node's prepare, so the prompt reserved is the one it sends."""
        ...

    def settle(self, step: StepRef, call: CallReport) -> Settled:
        """Book a call under its idempotency key (task, step, attempt) and announce it once ("llm_call")."""
        ...

    def booked(self, step: StepRef, before_attempt: int) -> list[LedgerEntry]:
        """The settled entries of the step's attempts before `before_attempt`."""
        ...

    def book_interrupted(self, step: StepRef, dead: list[DeadTokens]) -> None:
        """Book tokens of attempts that died unheard."""
        ...


class LeasePool(Protocol):
    """Worker leases on the GPU fleet (orchestrator.pool.service.PoolService)."""

    def acquire(self, req: LeaseRequest) -> LeaseGrant: ...

    def release(self, req: ReleaseLease) -> None: ...

    def liveness(self, node_id: str) -> NodeLiveness: ...
