"""The fleet step's phases as pure decisions (workflows/fleet_round.py, fleet_recovery.py): each takes the step's
state and an outcome and says what to do next, so they are checked here without a Temporal server."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from sdk import CheckpointRef
from sdk.wire.contracts import GenerationProgress, LlmStepInput, Message, Reply, Shortfall
from sdk.wire.lease import BookedRound, Direct, LeaseRequest, Never, NodeLiveness, Placed, Wait
from sdk.wire.recovery import DEFAULT_RECOVERY, QUIET_CONTINUES, Suspect
from workflows.fleet_outcomes import Failed, Interrupted, Pending, Unplaceable
from workflows.fleet_recovery import (
    MAX_LOAD_FAILURES,
    MAX_STEP_FAILURES,
    Conclude,
    ContinueQuiet,
    PlaceAgain,
    WaitForPickup,
    after_failure,
    after_interruption,
    after_load_failure,
    continued_quietly,
    interruption_record,
    suspected,
    weigh,
)
from workflows.fleet_round import (
    ATTEMPT_STRIDE,
    PLACE_UPDATE_EVERY,
    WAIT_MAX_S,
    FleetMemory,
    GiveUp,
    Round,
    Run,
    Waiting,
    WaitInQueue,
    asking,
    on_grant,
    placement_of,
)
from workflows.fleet_settle import release_of, settled
from workflows.interruptions import Interruption

T0 = datetime(2026, 1, 1, tzinfo=UTC)
CHECKPOINT = CheckpointRef(id=1, seq=1, step=1, hash="h")
INP = LlmStepInput(task_id="t", step=2, checkpoint=CHECKPOINT, model="m", max_tokens=200, token_allowance=1000)
REQUEST = LeaseRequest(task_id="t", step=2, model="m", tokens=200)
SPOT = Placed(lease_id="l1", node_id="gpu-a", replica_id="r1", zone="z1", capacity="spot")
ALIVE = NodeLiveness(verdict="alive", detail="heard from 0.4s ago")
UNKNOWN = NodeLiveness(verdict="unknown", detail="silent for 9.0s")
GONE = NodeLiveness(verdict="gone", detail="node gpu-a is lost")
SILENT = Interruption("lost", "the node stopped heartbeating", None)
UNPICKED = Interruption("lost", "the node never picked the call up", None, replica_gone=False, never_started=True)


def a_round(**changes: object) -> Round:
    return replace(Round.starting(INP, REQUEST, T0, first_placement=0), **changes)  # type: ignore[arg-type]  # test rounds vary any field


# ----- a timeout, weighed against the evidence about its node -------------------------------------------------------
def test_only_a_lost_interruption_is_a_suspicion_to_weigh() -> None:
    assert suspected(Interrupted(SILENT)) is SILENT
    assert suspected(Interrupted(Interruption("notice", "reclaimed", None))) is None
    assert suspected(Failed(None, "generate", "boom")) is None


def test_a_quiet_generation_on_a_live_node_is_continued_there_a_few_times_then_counted_stalled() -> None:
    suspect = Suspect()
    for n in range(1, QUIET_CONTINUES + 1):
        decision = weigh(SILENT, ALIVE, suspect, "gpu-a", "step 2's call")
        assert isinstance(decision, ContinueQuiet) and decision.lost.kind == "stalled"
        assert "but it is alive (heard from 0.4s ago)" in decision.lost.detail and not decision.lost.replica_gone
        suspect = decision.suspect
        assert suspect.quiet == n
    last = weigh(SILENT, ALIVE, suspect, "gpu-a", "step 2's call")
    assert isinstance(last, Conclude) and isinstance(last.outcome, Interrupted)
    assert last.outcome.interruption.kind == "stalled"


def test_a_load_that_goes_quiet_on_a_live_node_is_stalled_at_once() -> None:
    decision = weigh(SILENT, ALIVE, Suspect(continuable=False), "gpu-a", "its load")
    assert isinstance(decision, Conclude) and isinstance(decision.outcome, Interrupted)
    assert decision.outcome.interruption.kind == "stalled"


def test_a_silent_node_nothing_proves_alive_is_gone() -> None:
    for evidence in (UNKNOWN, GONE):
        decision = weigh(SILENT, evidence, Suspect(), "gpu-a", "step 2's call")
        assert isinstance(decision, Conclude) and isinstance(decision.outcome, Interrupted)
        gone = decision.outcome.interruption
        assert (gone.kind, gone.detail) == (
            "lost",
            f"the node stopped heartbeating, and it is gone ({evidence.detail})",
        )


def test_a_busy_node_keeps_its_call_and_an_unproven_one_loses_it_at_its_second_missed_pickup() -> None:
    busy = weigh(UNPICKED, ALIVE, Suspect(), "gpu-a", "step 2's call")
    assert isinstance(busy, WaitForPickup) and busy.suspect == Suspect()  # a live node is waited for, uncounted
    assert (
        busy.say == "gpu: waiting for gpu-a to pick step 2's call up: the node is busy, not gone (heard from 0.4s ago)"
    )
    first = weigh(UNPICKED, UNKNOWN, Suspect(), "gpu-a", "its load")
    assert isinstance(first, WaitForPickup) and first.suspect.unproven == 1
    second = weigh(UNPICKED, UNKNOWN, first.suspect, "gpu-a", "its load")
    assert isinstance(second, Conclude) and isinstance(second.outcome, Interrupted)
    assert second.outcome.interruption.kind == "lost" and second.outcome.interruption.never_started


def test_a_continued_generation_goes_on_from_its_last_heartbeat_or_from_what_it_was_given() -> None:
    given = GenerationProgress(attempt=1, generated=5)
    beat = GenerationProgress(attempt=2, generated=9)
    inp = INP.model_copy(update={"attempt_base": 100, "inherited_progress": given})
    assert continued_quietly(inp, replace(SILENT, progress=beat)).inherited_progress == beat
    again = continued_quietly(inp, SILENT)
    assert (again.attempt_base, again.inherited_progress) == (101, given)


# ----- acquire -----------------------------------------------------------------------------------------------------
def test_a_placed_step_runs_and_one_no_node_can_serve_gives_up() -> None:
    placed = on_grant(SPOT, Waiting(), REQUEST, T0)
    assert placed == Run(SPOT)
    assert on_grant(Direct(reason="hosted"), Waiting(), REQUEST, T0) == Run(Direct(reason="hosted"))
    never = on_grant(Never(reason="no GPU holds it"), Waiting(), REQUEST, T0)
    assert isinstance(never, GiveUp) and isinstance(never.error, Unplaceable)


def test_a_waiting_step_shows_its_place_when_the_reason_changes_or_a_while_has_passed_and_backs_off() -> None:
    busy = Wait(reason="every replica is busy", wait_reason="busy", queue_position=3)
    first = on_grant(busy, Waiting(), REQUEST, T0)
    assert isinstance(first, WaitInQueue)
    assert first.say == "gpu: every replica is busy (place 3 in the queue for m)"
    assert first.pause == timedelta(seconds=0.5)
    later = on_grant(busy, first.then, REQUEST, T0 + timedelta(seconds=1))
    assert isinstance(later, WaitInQueue) and later.say is None and later.pause == timedelta(seconds=1)
    cold = Wait(reason="a replica is loading", wait_reason="cold_start", queue_position=1)
    changed = on_grant(cold, later.then, REQUEST, T0 + timedelta(seconds=2))
    assert isinstance(changed, WaitInQueue) and changed.say is not None
    stale = on_grant(cold, changed.then, REQUEST, T0 + timedelta(seconds=2) + PLACE_UPDATE_EVERY)
    assert isinstance(stale, WaitInQueue) and stale.say is not None
    waiting = Waiting()
    for _ in range(10):
        decision = on_grant(busy, waiting, REQUEST, T0)
        assert isinstance(decision, WaitInQueue)
        waiting = decision.then
    assert waiting.pause_s == WAIT_MAX_S


def test_each_placement_asks_for_its_own_attempts_without_the_nodes_it_must_avoid() -> None:
    rnd = a_round(excluded={"gpu-a": T0}, avoided_zones=frozenset({"z1"}))
    memory = FleetMemory(gone_nodes=frozenset({"gpu-x"}), previous_replica="r0", context_tokens=70)
    asked = asking(rnd, 2, memory, T0 + timedelta(seconds=1), timedelta(seconds=7))
    assert (asked.exclude_nodes, asked.avoid_spot_zones) == (["gpu-x", "gpu-a"], ["z1"])
    assert (asked.previous_replica, asked.prompt_tokens) == ("r0", 70)
    assert asked.limits is not None
    assert (asked.limits.first_attempt, asked.limits.last_attempt) == (2 * ATTEMPT_STRIDE + 1, 3 * ATTEMPT_STRIDE)
    assert asked.limits.quiet_after_s == 7  # the task's own heartbeat timeout judges its continuations


def test_the_memory_carries_placements_across_rounds_and_a_model_off_the_fleet_for_a_while() -> None:
    memory = FleetMemory(placements_step=2, placements_used=3)
    assert memory.first_placement(2) == 3 and memory.first_placement(3) == 0
    off = memory.off_the_fleet(REQUEST)
    assert off.calls_direct(REQUEST.model_copy(update={"step": 21})) and not off.calls_direct(
        REQUEST.model_copy(update={"step": 22})
    )
    beat = GenerationProgress(attempt=1, generated=4)
    cut = memory.interrupted(beat).interrupted(None)
    assert (cut.interruptions, cut.inherited) == (2, beat)


# ----- settle ------------------------------------------------------------------------------------------------------
def test_a_reply_is_charged_what_the_ledger_booked_and_one_it_never_booked_fails_the_step() -> None:
    reply = Reply(message=Message(role="assistant", content="hi"), prompt_tokens=1, checkpoint=CHECKPOINT)
    booked = BookedRound(settled_calls=1, prompt_tokens=40, completion_tokens=2)
    charged = settled(a_round(), SPOT, None, reply, booked)
    assert isinstance(charged, Reply) and (charged.prompt_tokens, charged.completion_tokens) == (40, 2)
    unbooked = settled(a_round(), SPOT, None, reply, None)
    assert isinstance(unbooked, Failed) and unbooked.phase == "books"
    short = Shortfall(shortfall_tokens=5, checkpoint=CHECKPOINT)
    assert isinstance(settled(a_round(), SPOT, None, short, None), Shortfall)


def test_a_released_lease_says_whether_its_replica_is_warm_or_gone() -> None:
    reply = Reply(message=Message(role="assistant", content="hi"), checkpoint=CHECKPOINT)
    warm = release_of(a_round(), SPOT, None, reply)
    assert (warm.replica_warm, warm.replica_gone, warm.booked_round is not None) == (True, False, True)
    load_failed = release_of(a_round(), SPOT, None, Failed(None, "load", "oom"))
    assert (load_failed.replica_warm, load_failed.replica_gone) == (False, True)
    # A generation that went quiet on a live node leaves its replica there; one cut by a lost node does not.
    placement = placement_of(a_round(), SPOT, 0.0, T0)
    stalled = Interrupted(Interruption("stalled", "quiet", None, replica_gone=False))
    assert not release_of(a_round(), SPOT, placement, stalled).replica_gone
    assert release_of(a_round(), SPOT, placement, Interrupted(SILENT)).replica_gone


# ----- recovery ----------------------------------------------------------------------------------------------------
def test_an_interrupted_step_is_placed_away_from_the_node_and_its_spot_zone_keeping_its_text() -> None:
    beat = GenerationProgress(attempt=1, generated=30, prefix="x" * 40, prefix_tokens=30, prefix_own=30)
    lost = Interruption("notice", "the node is being reclaimed", beat)
    decision = after_interruption(a_round(), SPOT, lost, DEFAULT_RECOVERY, T0, 1, 3)
    assert isinstance(decision, PlaceAgain)
    rnd = decision.round
    assert (rnd.excluded, rnd.avoided_zones, rnd.trouble) == ({"gpu-a": T0}, frozenset({"z1"}), "preemption")
    assert rnd.pending == Pending(lost, SPOT, T0, tokens_kept=30, tokens_lost=0)
    assert decision.say == "gpu: step 2 resuming: the node is being reclaimed (gpu-a)" and decision.pause is None
    over = after_interruption(a_round(), SPOT, lost, DEFAULT_RECOVERY, T0, 4, 3)
    assert isinstance(over, GiveUp) and "interrupted 4 times (max_interruptions=3)" in str(over.error)


def test_a_failed_call_is_retried_after_a_growing_pause_until_the_failures_run_out() -> None:
    failed = Failed(None, "generate", "engine crashed")
    decision = after_failure(a_round(), SPOT, failed, T0)
    assert isinstance(decision, PlaceAgain) and decision.pause == timedelta(seconds=2)
    assert (decision.round.failures, decision.round.trouble, decision.round.excluded) == (1, "crash_loop", {})
    books = after_failure(a_round(), SPOT, Failed(None, "books", "unbooked"), T0)
    assert isinstance(books, PlaceAgain) and books.round.excluded == {"gpu-a": T0}
    last = after_failure(a_round(failures=MAX_STEP_FAILURES - 1), SPOT, failed, T0)
    assert isinstance(last, GiveUp) and isinstance(last.error, Unplaceable)


def test_a_model_that_fails_to_load_everywhere_gives_up_naming_the_nodes() -> None:
    failed = Failed(None, "load", "CUDA out of memory")
    decision = after_load_failure(a_round(), SPOT, failed, T0)
    assert isinstance(decision, PlaceAgain) and decision.round.load_failures == 1
    assert decision.round.excluded == {"gpu-a": T0}
    tried = a_round(excluded={"gpu-b": T0}, load_failures=MAX_LOAD_FAILURES - 1)
    last = after_load_failure(tried, SPOT, failed, T0)
    assert isinstance(last, GiveUp)
    assert str(last.error) == "m failed to load 3 times (on gpu-b, gpu-a): CUDA out of memory"


def test_the_interruption_event_keeps_its_keys() -> None:
    pending = Pending(Interruption("notice", "reclaimed", None), SPOT, T0, tokens_kept=7, tokens_lost=2)
    resumed = Placed(lease_id="l2", node_id="gpu-b", replica_id="r2", tier="disk")
    record = interruption_record(pending, 2, resumed, T0 + timedelta(seconds=1.25))
    assert record.model_dump(mode="json", exclude_unset=True) == {  # as the workflow's event writer stores it
        "step": 2,
        "node_id": "gpu-a",
        "replica_id": "r1",
        "kind": "notice",
        "detail": "reclaimed",
        "at": T0.isoformat().replace("+00:00", "Z"),
        "tokens_kept": 7,
        "tokens_lost": 2,
        "resumed_on": "gpu-b",
        "resumed_replica": "r2",
        "resumed_tier": "disk",
        "resume_s": 1.25,
    }


@pytest.mark.parametrize("phase", ["generate", "books"])
def test_a_failure_that_exhausts_the_retries_never_places_again(phase: str) -> None:
    decision = after_failure(a_round(failures=MAX_STEP_FAILURES), SPOT, Failed(None, phase, "x"), T0)  # type: ignore[arg-type]  # the phase is one of the literal's
    assert isinstance(decision, GiveUp)
