"""The services activities need, as protocols.

The orchestrator hands concrete implementations (the sqlmodel store, the model catalogue)
to the activity classes' constructors, so activity code never imports the orchestrator and
a test can hand in anything with the same methods.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from sdk import AgentSpec, Message, TaskState
from sdk._lease import LeaseGrant, LeaseRequest, ReleaseLease, StepPlacement
from sdk.contracts import CheckpointRef, PendingStep


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
    """How litellm reaches a model: its route string, base URL and key, and what it costs."""

    name: str
    litellm_model: str
    api_base: str | None
    api_key: str | None
    usd_per_1m_prompt: float | None
    usd_per_1m_completion: float | None
    served_by: str


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


class TaskRegistry(Protocol):
    def save_state(self, state: TaskState, spec_json: str | None = None) -> None: ...


class EventLog(Protocol):
    def append(self, task_id: str, kind: str, data: dict) -> int: ...


class AgentCatalogue(Protocol):
    def get(self, name: str, version: str | None = None, visible_to: str | None = None) -> AgentSpec | None: ...


REPLICA_UNAVAILABLE = "ReplicaUnavailable"  # the error type a workflow re-places a step on
NODE_STOPPING = "NodeStopping"  # the node was told to leave while the step generated: re-place it elsewhere
GENERATION_CUT = "GenerationCut"  # the workflow cancelled the generation (a simulated preemption)


class ReplicaUnavailable(Exception):
    """The step's leased replica no longer serves on this node (unloaded, node restarted)."""


class ModelRouter(Protocol):
    def route(self, model: str, placement: StepPlacement | None) -> ModelRoute:
        """How to reach `model`; `placement` is the leased replica when the fleet serves the step."""
        ...


@dataclass(frozen=True)
class PreparedStep:
    """What a step starts from: the checkpoint after its pending step, and the conversation up to it."""

    checkpoint: CheckpointRef
    messages: list[Message]


class StepBooks(Protocol):
    """The LLM step's bookkeeping, in calls coarse enough to cross a network.

    On the control plane these are store calls (activities/step_books.py); on a GPU node,
    which has no database, they are HTTP calls to the control plane, so each method is one
    round trip and a normal step costs two (prepare, settle).
    """

    def prepare(self, task_id: str, checkpoint: CheckpointRef, pending: PendingStep | None) -> PreparedStep:
        """Write `pending` (checkpoint, task state, step event) when given, then read the conversation."""
        ...

    def settle(self, entry: LedgerEntry, event: dict) -> bool:
        """Book a call under its idempotency key and announce it once ("llm_call"); True when newly booked."""
        ...

    def booked(self, task_id: str, step: int, before_attempt: int) -> list[LedgerEntry]:
        """The settled entries of the step's attempts before `before_attempt`."""
        ...

    def book_interrupted(self, entries: list[LedgerEntry]) -> None:
        """Book tokens of attempts that died unheard (entries of kind LOST or KEPT)."""
        ...


class LeasePool(Protocol):
    """Worker leases on the GPU fleet (orchestrator.pool.service.PoolService)."""

    def acquire(self, req: LeaseRequest) -> LeaseGrant: ...

    def release(self, req: ReleaseLease) -> None: ...
