"""The services activities need, as protocols.

The orchestrator hands concrete implementations (the sqlmodel store, the model catalogue)
to the activity classes' constructors, so activity code never imports the orchestrator and
a test can hand in anything with the same methods. The values that cross these ports (ledger
rows, a step's call report, a model's route) are plain data in the core: sdk/wire/ledger.py
and sdk/wire/step_call.py.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, Protocol

from sdk import AgentSpec, Message, TaskState
from sdk.wire.contracts import CheckpointRef, PendingStep
from sdk.wire.lease import LeaseGrant, LeaseRequest, NodeLiveness, ReleaseLease, StepPlacement
from sdk.wire.ledger import DeadTokens, LedgerEntry
from sdk.wire.step_call import CallReport, CheckpointContent, ModelRoute, PreparedStep, Settled, StepRef


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
    def save_state(self, state: TaskState, spec_json: str | None = None) -> bool: ...  # True: this write ended it


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


class StepBooks(Protocol):
    """The LLM step's bookkeeping, in calls coarse enough to cross a network.

    On the control plane these are store calls (activities/step/store_books.py); on a GPU node,
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
        *,
        attempt: int = 1,
    ) -> PreparedStep:
        """Write `pending` (checkpoint, task state, step event) when given, then read the conversation.
        A node never writes: its step's predecessor was written beside the store before the lease. The call's
        own `instructions` and `tools` go with a node's prepare, so the prompt reserved is the one it sends; so
        does the `attempt` it prepares, which the control plane records: it books only for attempts it saw
        start."""
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
