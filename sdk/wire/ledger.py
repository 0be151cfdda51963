"""The token ledger's rows: one LLM call's cost, or the tokens of an attempt that died, and what a round adds up to.

The ledger is keyed (task, step, attempt) so that a retried write counts once. The store keeps the rows
(orchestrator/store/ledger.py); the LLM step, the lease's release and the control plane's step routes write and
sum them by the rules here, with no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .lease import BookedRound

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
    kind: str = "settled"  # SETTLED, LOST or KEPT
    response_id: str = ""  # the engine's reply id, so a retry can tell a replay of a booked reply


@dataclass(frozen=True)
class DeadTokens:
    """Tokens an attempt generated before it died: LOST (nobody received them) or KEPT (the reply went on from
    them), priced at the completion rate."""

    attempt: int
    kind: str
    tokens: int
    cost_usd: float


def booked_round(entries: Iterable[LedgerEntry]) -> BookedRound:
    """What some ledger entries (a round of a step) add up to: lost and kept rows count completion tokens only."""
    entries = tuple(entries)
    settled = [e for e in entries if e.kind not in (LOST, KEPT)]
    return BookedRound(
        settled_calls=len(settled),
        prompt_tokens=sum(e.prompt_tokens for e in settled),
        completion_tokens=sum(e.completion_tokens for e in settled),
        lost_tokens=sum(e.completion_tokens for e in entries if e.kind == LOST),
        kept_tokens=sum(e.completion_tokens for e in entries if e.kind == KEPT),
        cost_usd=sum(e.cost_usd for e in entries),
    )
