"""What a step's time on a node can come to: the outcomes the fleet step's phases hand each other.

A generation (or a replica's load) ends in a reply, a shortfall, an interruption (its node went away, or is cut off),
a failure (the call went wrong on a node that is there) or the task's cancellation. Plain values, so the phases that
weigh them (fleet_round.py, fleet_recovery.py) are pure functions a unit test calls without a Temporal server.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Literal

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from sdk import CheckpointRef
    from sdk.wire.contracts import GenerationProgress, Reply, Shortfall
    from sdk.wire.lease import Placed

    from .interruptions import Interruption, interruption


class Unplaceable(Exception):
    """No node could ever serve this step, its loads keep failing, or it was interrupted too often."""


@dataclass(frozen=True)
class Interrupted:
    """The generation (or load) ended without a reply because its node went away, or is cut off."""

    interruption: Interruption


@dataclass(frozen=True)
class Failed:
    """The load or the call itself went wrong on a node that is there."""

    error: ActivityError | None
    phase: Literal["load", "generate", "books"]  # books: it answered without booking the call
    detail: str


@dataclass(frozen=True)
class StepCut:
    """The task's cancellation cut the step's generation: what it had written, as booked (lost)."""

    lost_tokens: int
    cost_usd: float
    checkpoint: CheckpointRef | None  # the step's predecessor, when it was written before the cut


@dataclass(frozen=True)
class Cancelled:
    """The task's cancellation stopped the generation (or the wait for a load): its last heartbeat, if any."""

    progress: GenerationProgress | None


Generation = Reply | Shortfall | Interrupted | Failed | Cancelled


@dataclass(frozen=True)
class Pending:
    """An interruption waiting to be recorded with where the step resumed."""

    interruption: Interruption
    grant: Placed
    at: datetime
    tokens_kept: int
    tokens_lost: int


def classified(err: ActivityError, phase: Literal["load", "generate"]) -> Interrupted | Failed:
    """A node call's error as an interruption (the node went away) or a failure (the call went wrong)."""
    lost = interruption(err)
    return Interrupted(lost) if lost is not None else Failed(err, phase, cause_of(err))


def carrying(outcome: Generation, carried: GenerationProgress | None) -> Generation:
    """A continued quiet generation's cut, keeping the text it carried when the continuation itself reported
    nothing (its node died before it beat, or never picked it up): that text is still the step's to go on from."""
    if isinstance(outcome, Interrupted) and outcome.interruption.progress is None and carried is not None:
        return Interrupted(replace(outcome.interruption, progress=carried))
    return outcome


def cause_of(err: BaseException) -> str:
    """The innermost cause's message: what the node itself said."""
    while err.__cause__ is not None:
        err = err.__cause__
    return str(err) or type(err).__name__
