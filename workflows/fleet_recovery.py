"""What a step does when its time on a node ends without a reply, as pure functions of (state, outcome) -> decision.

    weigh                a timeout, against the pool's evidence about its node -> Conclude | WaitForPickup | ContinueQuiet
    after_interruption   the node went away or was cut off -> PlaceAgain (where the recovery rules allow) | GiveUp
    after_failure        the call went wrong on a node that is there -> PlaceAgain (after a pause) | GiveUp
    after_load_failure   the replica would not load there -> PlaceAgain (elsewhere) | GiveUp

What a timeout means is the suspect-node rules' (`Suspect` in sdk/wire/recovery.py), where the simulator reads them
too; where an interrupted step goes next is the task's recovery rules' (`avoid_after`, the same module).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from sdk.wire.contracts import LlmStepInput
    from sdk.wire.lease import NodeLiveness, Placed
    from sdk.wire.prefix import carried_prefix, continuable
    from sdk.wire.recovery import QUIET_CONTINUES, Cut, NodeTimeout, RecoveryRule, Suspect, avoid_after
    from sdk.wire.task_events import GenerationQuiet
    from sdk.wire.task_events import Interruption as InterruptionRecord

    from .fleet_outcomes import Failed, Generation, Interrupted, Pending, Unplaceable
    from .fleet_round import GiveUp, Round
    from .interruptions import Interruption, books_refused, is_permanent

MAX_STEP_FAILURES = 6  # failures (not interruptions) of one step's generation before the task fails
# Loads of one step that may fail (each excluding its node) before the task fails: a replica that
# crashes wherever it starts is a broken model or engine, not a capacity shortage.
MAX_LOAD_FAILURES = 3


# ----- a timeout, weighed -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Conclude:
    """The phase ends with this outcome (a timeout weighed: the node is gone, or its generation stalled)."""

    outcome: Generation


@dataclass(frozen=True)
class WaitForPickup:
    """The node is busy, not gone: send it the call again and wait for it to pick it up, showing why."""

    say: str
    suspect: Suspect


@dataclass(frozen=True)
class ContinueQuiet:
    """The generation went quiet on a node that is alive: continue it there, on the same lease."""

    lost: Interruption  # the quiet generation's cut, as `stalled`
    suspect: Suspect


Weighed = Conclude | WaitForPickup | ContinueQuiet


def suspected(outcome: Generation) -> Interruption | None:
    """The timeout to weigh against evidence about the node (a `lost` interruption), or None: nothing to weigh."""
    if isinstance(outcome, Interrupted) and outcome.interruption.kind == "lost":
        return outcome.interruption
    return None


def weigh(lost: Interruption, evidence: NodeLiveness, suspect: Suspect, node_id: str, what: str) -> Weighed:
    """The suspect-node rules' verdict on the timeout `lost` of `what` (a load, a step's call) on `node_id`."""
    timeout: NodeTimeout = "pickup" if lost.never_started else "heartbeat"
    verdict = suspect.verdict(timeout, evidence.verdict)
    then = suspect.after(verdict, evidence.verdict)
    if verdict == "gone":
        return Conclude(Interrupted(lost.gone(evidence.detail)))
    if verdict == "stalled":
        return Conclude(Interrupted(lost.stalled(evidence.detail)))
    if verdict == "continue_quiet":
        return ContinueQuiet(lost.stalled(evidence.detail), then)
    return WaitForPickup(
        f"gpu: waiting for {node_id} to pick {what} up: the node is busy, not gone ({evidence.detail})", then
    )


def continued_quietly(inp: LlmStepInput, lost: Interruption) -> LlmStepInput:
    """The next attempt of the same lease, continuing the text the quiet generation's last heartbeat carried (or what
    it had itself been given to continue, when it reported nothing)."""
    progress = lost.progress if lost.progress is not None else inp.inherited_progress
    return inp.model_copy(update={"attempt_base": inp.attempt_base + 1, "inherited_progress": progress})


def quiet_notice(inp: LlmStepInput, grant: Placed, lost: Interruption, quiet: int) -> str:
    return (
        f"gpu: step {inp.step}'s generation on {grant.node_id} went quiet but the node is alive:"
        f" continuing it there ({quiet} of {QUIET_CONTINUES}; {lost.detail})"
    )


def quiet_record(
    continued: LlmStepInput, grant: Placed, lost: Interruption, quiet: int, now: datetime
) -> GenerationQuiet:
    """The `generation_quiet` event: a continuation is said and recorded, not hidden."""
    progress = continued.inherited_progress
    return GenerationQuiet(
        step=continued.step,
        node_id=grant.node_id,
        replica_id=grant.replica_id,
        detail=lost.detail,
        continued=quiet,
        tokens_carried=progress.generated if progress is not None else 0,
        at=now,
    )


# ----- placed again, or given up ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PlaceAgain:
    """Ask for the step's next placement with `round`, showing `say` (under its trouble), after `pause` if any."""

    round: Round
    say: str
    pause: timedelta | None = None


def after_interruption(
    rnd: Round,
    grant: Placed,
    lost: Interruption,
    rules: Sequence[RecoveryRule],
    now: datetime,
    interruptions: int,
    max_interruptions: int,
) -> PlaceAgain | GiveUp:
    """Place the step again where the recovery rules allow, keeping what the generation had made; `interruptions`
    counts this one (never against the retry budget). Past `max_interruptions` the task gives up."""
    if interruptions > max_interruptions:
        return GiveUp(
            Unplaceable(
                f"interrupted {interruptions} times (max_interruptions={max_interruptions});"
                f" last on {grant.node_id}: {lost.detail}"
            )
        )
    avoid = avoid_after(rules, Cut(lost.kind, grant.node_id, grant.zone, grant.capacity))
    placed_again = replace(
        rnd,
        excluded={**rnd.excluded, **{node: now for node in avoid.nodes}},
        avoided_zones=rnd.avoided_zones | avoid.spot_zones,
        pending=pending_of(lost, grant, rnd.inp.max_tokens, now),
        trouble="preemption",
    )
    return PlaceAgain(placed_again, f"gpu: step {rnd.inp.step} resuming: {lost.detail} ({grant.node_id})")


def pending_of(lost: Interruption, grant: Placed, max_tokens: int, now: datetime) -> Pending:
    """The interruption as it will be recorded: what the next placement keeps of the cut text, and what is lost."""
    generated = lost.progress.generated if lost.progress is not None else 0
    prefix = carried_prefix(lost.progress)
    # Every fleet engine continues a final assistant message (vLLM, SGLang, llama.cpp, the simulated one).
    kept = min(prefix.own_tokens, generated) if prefix is not None and continuable(prefix, max_tokens) else 0
    return Pending(lost, grant, now, kept, generated - kept)


def after_failure(rnd: Round, grant: Placed, failed: Failed, now: datetime) -> PlaceAgain | GiveUp:
    """Retry a failed call after a growing pause, keeping out a node whose call the books would not take; give up on
    a failure no retry can fix, or after MAX_STEP_FAILURES."""
    failures = rnd.failures + 1
    refused = failed.error is not None and books_refused(failed.error)
    excluded = rnd.excluded
    if failed.phase == "books" or refused:  # the books would not (or did not) take this node's call
        excluded = {**excluded, grant.node_id: now}
    if failed.error is not None and ((is_permanent(failed.error) and not refused) or failures >= MAX_STEP_FAILURES):
        return GiveUp(failed.error)
    if failures >= MAX_STEP_FAILURES:
        return GiveUp(Unplaceable(f"step {rnd.inp.step}: {failed.detail} ({failures} times)"))
    return PlaceAgain(
        replace(rnd, failures=failures, excluded=excluded, trouble="crash_loop"),
        f"gpu: the model call failed on {grant.node_id} ({failures} of {MAX_STEP_FAILURES}): {failed.detail}",
        pause=timedelta(seconds=min(2**failures, 10)),
    )


def after_load_failure(rnd: Round, grant: Placed, failed: Failed, now: datetime) -> PlaceAgain | GiveUp:
    """Place the step elsewhere, keeping the node out; a model that fails to load MAX_LOAD_FAILURES times is broken."""
    excluded = {**rnd.excluded, grant.node_id: now}
    load_failures = rnd.load_failures + 1
    model = rnd.request.model
    if load_failures >= MAX_LOAD_FAILURES:
        error = Unplaceable(f"{model} failed to load {load_failures} times (on {', '.join(excluded)}): {failed.detail}")
        error.__cause__ = failed.error  # as `raise ... from failed.error`
        return GiveUp(error)
    return PlaceAgain(
        replace(rnd, excluded=excluded, load_failures=load_failures, trouble="crash_loop"),
        f"gpu: {model} failed to load on {grant.node_id} ({load_failures} of {MAX_LOAD_FAILURES}): {failed.detail}",
    )


def interruption_record(pending: Pending, step: int, resumed: Placed, now: datetime) -> InterruptionRecord:
    """The `interruption` event, once the step has a new place: where it was, what it lost, where it resumed, and
    how long that took."""
    return InterruptionRecord(
        step=step,
        node_id=pending.grant.node_id,
        replica_id=pending.grant.replica_id,
        kind=pending.interruption.kind,
        detail=pending.interruption.detail,
        at=pending.at,
        tokens_kept=pending.tokens_kept,
        tokens_lost=pending.tokens_lost,
        resumed_on=resumed.node_id,
        resumed_replica=resumed.replica_id,
        resumed_tier=resumed.tier,
        resume_s=round((now - pending.at).total_seconds(), 3),
    )
