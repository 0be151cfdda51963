"""What a GPU node may book under the lease it holds: the checks and the arithmetic, with no I/O.

A node is trusted to run a step's model call, not with money: everything it books is bounded by
what the step's workflow set on the lease (`StepLimits`) and by what the control plane saw happen
under it: the attempts it saw prepared, each with what it reserved once it had counted the prompt
itself (`CallReservation`). So whatever a node says:
- it books only for attempts that started: a call settles, and a dead attempt's tokens are lost or
  kept, only under an attempt a node prepared (of its own placement for a call, of its round for a
  dead attempt: the placement that takes a step over books what the cut one wrote);
- it prepares only the attempts the workflow can start on one placement: its first, then each quiet
  continuation (at most `QUIET_CONTINUES`), and a continuation only once the attempt before it had
  time to go quiet, so a node cannot mint attempts, each with a grant to claim, as fast as it asks;
- an attempt wrote at most its grant: its answer, and what it wrote before dying, together;
  its prompt is at most what was reserved for it;
- everything a round of the step books (the call, and the tokens of attempts that died before it)
  stays within the allowance the workflow gave the round, so the task's `used <= limit` holds;
- the price is the catalogue's, computed here.
- a dead attempt's tokens (lost or kept) are booked only as far as the step's cut generations were seen
  to write them: their heartbeats as Temporal recorded them, which the workflow writes down (its
  `interruption` and `generation_quiet` events) before the next attempt starts (`CutEvidence`).
What is left to a node's word is how much of each started attempt's grant it wrote when it settles:
the control plane cannot see its engine stream.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sdk.wire.lease import BookedRound, StepLimits
from sdk.wire.ledger import KEPT, LOST, SETTLED, LedgerEntry, booked_round
from sdk.wire.prices import Prices, call_cost, generated_cost
from sdk.wire.prompt_count import PromptCount
from sdk.wire.recovery import QUIET_CONTINUES
from sdk.wire.reserve import answer_grant
from sdk.wire.step_books import DeadAttemptBody, SettleStepRequest

from ..store import CallReservation

# Float sums of prices drift by a few ulps; a booking this far past a dollar allowance is still within it.
USD_SLACK = 1e-9


@dataclass(frozen=True)
class CutEvidence:
    """What a step's cut generations were seen to write, and what the step booked of that so far (all its rounds).

    `seen`: the tokens each cut generation's last heartbeat carried, as the workflow recorded them when it moved the
    step on (a quiet continuation, a placement elsewhere). A node that never heartbeat a token, or a lease whose step
    was never cut, has nothing to book as dead, whatever it says."""

    seen: int
    booked: int


class BookingRefused(Exception):
    """A node's booking that its lease does not allow, with the field to blame."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


@dataclass(frozen=True)
class Round:
    """What a round of a step has booked so far, and the attempts of it the control plane saw prepared, with what
    it reserved for each."""

    entries: list[LedgerEntry]
    prepared: Mapping[int, CallReservation] = field(default_factory=dict)

    @property
    def totals(self) -> BookedRound:
        return booked_round(self.entries)

    def has(self, attempt: int, kind: str) -> bool:
        return any(e.attempt == attempt and e.kind == kind for e in self.entries)

    def written(self, attempt: int) -> int:
        """Answer tokens booked for one attempt: its settled answer, and what it wrote before dying (lost, kept)."""
        return sum(e.completion_tokens for e in self.entries if e.attempt == attempt)


def check_prepare(
    limits: StepLimits, attempt: int, prepared_at: Mapping[int, datetime], now: datetime, quiet: timedelta
) -> None:
    """BookingRefused naming `attempt` unless the workflow can have started this attempt on the lease's placement.

    A placement runs its first attempt, and the workflow starts the next only when the one before went quiet for a
    heartbeat timeout (`quiet`, counted by Temporal from that attempt's start, which its prepare follows by a
    moment: half of it is asked here, so a busy control plane's clock never refuses an honest continuation), at
    most `QUIET_CONTINUES` times. `prepared_at`: the attempts this lease's node prepared, and when.
    """
    last = min(limits.last_attempt, limits.first_attempt + QUIET_CONTINUES)
    _check_attempt(attempt, limits.first_attempt, last, "attempt")
    if attempt == limits.first_attempt or attempt in prepared_at:  # the first, or a prepare retried
        return
    before = prepared_at.get(attempt - 1)
    if before is None:
        raise BookingRefused(
            "attempt",
            f"attempt {attempt} continues attempt {attempt - 1} of this placement, which was never prepared",
        )
    waited = now - before
    if waited < quiet / 2:
        raise BookingRefused(
            "attempt",
            f"attempt {attempt} continues attempt {attempt - 1} once it went quiet for"
            f" {quiet.total_seconds():g} s, but attempt {attempt - 1} was prepared {waited.total_seconds():.1f} s ago",
        )


def reserve_call(
    limits: StepLimits, booked: BookedRound, counted: PromptCount, prices: Prices | None
) -> CallReservation:
    """Set aside the prompt (as counted here, with the margin for what the count may miss: an engine's template
    when counted by OpenAI's formula, the re-sent kept text of a continuation) and grant what the round's
    allowance leaves for the answer: never more than the step's max_tokens less the kept text it goes on from,
    nor than its dollars pay for."""
    prompt = counted.reserved(booked.kept_tokens)
    usd_answer = None
    if limits.usd_allowance is not None and prices is not None:
        usd_answer = prices.affordable_completion(limits.usd_allowance - booked.cost_usd, prompt)
    max_tokens = answer_grant(
        limits.max_tokens - booked.kept_tokens, limits.token_allowance - booked.tokens, prompt, usd_answer
    )
    return CallReservation(prompt_tokens=prompt, max_tokens=max(0, max_tokens))


def check_settle(limits: StepLimits, booked: Round, req: SettleStepRequest, prices: Prices | None) -> float:
    """The call's price when the lease allows booking it; BookingRefused naming the field otherwise."""
    _check_attempt(req.attempt, limits.first_attempt, limits.last_attempt, "attempt")
    reservation = booked.prepared.get(req.attempt)
    if reservation is None:
        raise BookingRefused("attempt", f"nothing was reserved for attempt {req.attempt}'s call: prepare it first")
    before = booked.written(req.attempt)  # booked as written by this attempt before: not by an honest node
    if req.completion_tokens + before > reservation.max_tokens:
        told = f"{req.completion_tokens} answer tokens, but attempt {req.attempt} was granted {reservation.max_tokens}"
        raise BookingRefused("completion_tokens", told + (f", {before} of them booked already" if before else ""))
    if req.prompt_tokens + req.completion_tokens > reservation.tokens:
        raise BookingRefused(
            "prompt_tokens",
            f"{req.prompt_tokens} prompt and {req.completion_tokens} answer tokens,"
            f" but the lease reserved {reservation.tokens} in all",
        )
    totals = booked.totals
    if req.continued_tokens > totals.kept_tokens:
        raise BookingRefused(
            "continued_tokens",
            f"the call continued {req.continued_tokens} tokens, but the step kept {totals.kept_tokens}",
        )
    _check_within(
        limits,
        totals,
        req.prompt_tokens + req.completion_tokens,
        call_cost(prices, req.prompt_tokens, req.completion_tokens),
    )
    return call_cost(prices, req.prompt_tokens, req.completion_tokens)


def check_dead(
    limits: StepLimits, booked: Round, entries: Iterable[DeadAttemptBody], prices: Prices | None, cut: CutEvidence
) -> list[DeadAttemptBody]:
    """The dead attempts' entries not booked yet, when the lease allows booking them all: each names an attempt of the
    round that was prepared, what each attempt wrote (lost, kept, and any answer it settled) fits its grant, and the
    step's dead tokens stay within what its cut generations were seen to write."""
    new: list[DeadAttemptBody] = []
    dead = cut.booked
    for i, entry in enumerate(entries):
        _check_attempt(entry.attempt, limits.round_first_attempt, limits.last_attempt, f"entries.{i}.attempt")
        reservation = booked.prepared.get(entry.attempt)
        if reservation is None:
            raise BookingRefused(
                f"entries.{i}.attempt",
                f"attempt {entry.attempt} never started: no call was prepared for it in this step's round",
            )
        kind = LOST if entry.kind == "lost" else KEPT
        if booked.has(entry.attempt, kind) or any((e.attempt, e.kind) == (entry.attempt, entry.kind) for e in new):
            continue  # booked already: a retried booking
        written = booked.written(entry.attempt) + sum(e.tokens for e in new if e.attempt == entry.attempt)
        if written + entry.tokens > reservation.max_tokens:
            raise BookingRefused(
                f"entries.{i}.tokens",
                f"attempt {entry.attempt} cannot have written {written + entry.tokens} tokens:"
                f" it was granted {reservation.max_tokens}",
            )
        if dead + entry.tokens > cut.seen:
            raise BookingRefused(
                f"entries.{i}.tokens",
                f"the step's cut generations were seen to write {cut.seen} tokens before they were cut (their"
                f" heartbeats, as the workflow recorded them); {dead} are booked already, so {entry.tokens} more"
                " cannot be",
            )
        dead += entry.tokens
        new.append(entry)
    tokens = sum(e.tokens for e in new)
    _check_within(limits, booked.totals, tokens, generated_cost(prices, tokens))
    return new


def booked_settled(booked: Round, before_attempt: int) -> list[LedgerEntry]:
    return [e for e in booked.entries if e.kind == SETTLED and e.attempt < before_attempt]


def _check_attempt(attempt: int, first: int, last: int, field: str) -> None:
    if not first <= attempt <= last:
        raise BookingRefused(field, f"attempt {attempt} is not one this lease books (attempts {first} to {last})")


def _check_within(limits: StepLimits, totals: BookedRound, tokens: int, usd: float) -> None:
    if totals.tokens + tokens > limits.token_allowance:
        raise BookingRefused(
            "tokens",
            f"the step would book {totals.tokens + tokens} tokens, beyond the"
            f" {limits.token_allowance} its task allowed it",
        )
    if limits.usd_allowance is not None and totals.cost_usd + usd > limits.usd_allowance + USD_SLACK:
        raise BookingRefused(
            "usd",
            f"the step would book ${totals.cost_usd + usd:.6f}, beyond the"
            f" ${limits.usd_allowance:.6f} its task allowed it",
        )
