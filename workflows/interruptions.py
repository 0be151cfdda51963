"""Telling an interruption (the node went away) from a failure (the call went wrong).

A step on the fleet can end without a reply in two very different ways, and the workflow
treats them apart:
- an **interruption** — the node stopped answering (heartbeat timeout), never picked the call
  up (schedule-to-start timeout), was told to stop (preemption notice), or no longer has the
  replica — says nothing about the task: the step is placed again, counted against
  `max_interruptions`, never against the retry budget. A timeout is only a suspicion: whether
  the node is gone is decided by evidence about the node (fleet_recovery.py weighs what the pool says);
- a **failure** — the engine or the call itself erred — is retried a few times and then fails
  the task; a request the engine rejects is not retried at all.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError, TimeoutError, TimeoutType

with workflow.unsafe.imports_passed_through():
    from sdk.wire.contracts import GENERATION_CUT, NODE_STOPPING, REPLICA_UNAVAILABLE, GenerationProgress
    from sdk.wire.recovery import InterruptionKind

BOOKS_REFUSED = "StepBooksRefused"  # the control plane would not book a node's call (orchestrator/node/generation.py)


@dataclass(frozen=True)
class Interruption:
    kind: InterruptionKind
    detail: str
    progress: GenerationProgress | None  # the generation's last heartbeat: what it had generated
    # The node is known to have lost the replica (it died mid-stream, is leaving, or said so). A call
    # never picked up says only that the node is slow or gone: the pool's node heartbeats decide.
    replica_gone: bool = True
    never_started: bool = False  # a call no node picked up: nothing was generated, nothing is lost

    def gone(self, evidence: str) -> Interruption:
        """The timeout, with the evidence that the node is indeed gone."""
        return replace(self, detail=f"{self.detail}, and it is gone ({evidence})")

    def stalled(self, evidence: str) -> Interruption:
        """The same timeout on a node the evidence shows alive: a busy machine, not a lost node."""
        return replace(self, kind="stalled", detail=f"{self.detail}, but it is alive ({evidence})", replica_gone=False)


def revoked(node_id: str) -> Interruption:
    """The cut of a step whose node the control plane revoked (or removed). What a revoked node wrote is not
    continued from (it is no longer trusted), nor booked: the control plane books nothing for it any more."""
    return Interruption("revoked", f"the control plane revoked node {node_id}", None)


def interruption(err: ActivityError) -> Interruption | None:
    """The interruption `err` is, or None when it is a failure."""
    cause = err.cause
    if isinstance(cause, TimeoutError) and cause.type in (TimeoutType.HEARTBEAT, TimeoutType.SCHEDULE_TO_START):
        silent = cause.type == TimeoutType.HEARTBEAT
        what = "stopped heartbeating" if silent else "never picked the call up"
        return Interruption(
            "lost",
            f"the node {what}",
            GenerationProgress.from_details(cause.last_heartbeat_details),
            replica_gone=silent,
            never_started=not silent,
        )
    if isinstance(cause, ApplicationError) and cause.type == NODE_STOPPING:
        return Interruption("notice", str(cause.message), GenerationProgress.from_details(cause.details))
    if isinstance(cause, ApplicationError) and cause.type == GENERATION_CUT:
        return Interruption(
            "simulated",
            "a simulated preemption cut the generation",
            GenerationProgress.from_details(cause.details),
            replica_gone=False,
        )
    if isinstance(cause, CancelledError):  # cut before the node had started it
        return Interruption(
            "simulated", "a simulated preemption cut the generation before it started", None, replica_gone=False
        )
    if isinstance(cause, ApplicationError) and cause.type == REPLICA_UNAVAILABLE:
        return Interruption("replica_gone", str(cause.message), None)
    return None


def progress_of(err: ActivityError) -> GenerationProgress | None:
    """What a generation cut off (by a cancellation, a notice) had done, as its failure reports it."""
    cause = err.cause
    if isinstance(cause, ApplicationError):
        return GenerationProgress.from_details(cause.details)
    if isinstance(cause, TimeoutError):
        return GenerationProgress.from_details(cause.last_heartbeat_details)
    return None


def books_refused(err: ActivityError) -> bool:
    """The control plane refused to book the node's call (its lease ended, or the node booked beyond it)."""
    cause = err.cause
    return isinstance(cause, ApplicationError) and cause.type == BOOKS_REFUSED


def is_permanent(err: ActivityError) -> bool:
    """A failure no retry can fix (the engine rejected the request, the model is unknown)."""
    cause = err.cause
    return isinstance(cause, ApplicationError) and cause.non_retryable
