"""What earlier attempts of one LLM call generated before they died, carried in heartbeats.

Temporal retries a dead attempt with the same input, so the only memory between attempts is
the heartbeat details the last one managed to send. A dead attempt's tokens are either
*lost* (the engine generated them and nobody will use them: booked as such, never hidden)
or, when the engine replays the finished reply under the step's idempotency key, not lost
at all: the retry receives them. Which one is only known once the retry sees the reply's
id, so a dead attempt stays `unresolved` until then, and its tokens are held back from the
allowance meanwhile so the budget holds either way.

An attempt can also die after booking its reply in the ledger but before Temporal heard of
it. The retry finds that `booked` row: the same reply id again means the replay of a reply
already booked (book nothing more); another id means the booked reply was real spend the
workflow never saw, so it is reported for the workflow to charge.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class DeadAttempt:
    attempt: int
    generated: int
    response_id: str | None


@dataclass(frozen=True)
class BookedAttempt:
    attempt: int
    tokens: int
    usd: float
    response_id: str


@dataclass
class Attempts:
    attempt: int
    generated: int = 0
    response_id: str | None = None
    lost_before: int = 0
    unresolved: list[DeadAttempt] = field(default_factory=list)
    booked: list[BookedAttempt] = field(default_factory=list)
    replayed: bool = False  # this attempt's reply is one an earlier attempt already booked
    unreported_tokens: int = 0
    unreported_usd: float = 0.0

    @classmethod
    def resume(cls, attempt: int, heartbeat_details: Any) -> "Attempts":
        """This attempt's view, from the details the previous attempt last sent (if any)."""
        last = heartbeat_details[0] if isinstance(heartbeat_details, (list, tuple)) and heartbeat_details else None
        if not isinstance(last, dict) or int(last.get("attempt", attempt)) == attempt:
            return cls(attempt)
        unresolved = [DeadAttempt(int(u["attempt"]), int(u["generated"]), u.get("response_id"))
                      for u in last.get("unresolved", [])]
        if int(last.get("generated", 0)) > 0:
            unresolved.append(DeadAttempt(int(last["attempt"]), int(last["generated"]), last.get("response_id")))
        return cls(attempt, lost_before=int(last.get("lost_before", 0)), unresolved=unresolved)

    @property
    def held_back(self) -> int:
        """Tokens the allowance must not give to this attempt: lost, or possibly lost."""
        return self.lost_before + sum(u.generated for u in self.unresolved) + sum(b.tokens for b in self.booked)

    def resolve(self, response_id: str | None) -> list[DeadAttempt]:
        """Settle the dead attempts once this attempt's reply id is known (None: no reply will come).

        Returns the ones whose tokens are lost; a dead attempt with the same reply id is the
        engine's replay of that very reply, so its tokens reach this attempt instead.
        """
        lost = [u for u in self.unresolved if response_id is None or u.response_id != response_id]
        self.lost_before += sum(u.generated for u in lost)
        self.unresolved = []
        self.replayed = response_id is not None and any(b.response_id == response_id for b in self.booked)
        unreported = [b for b in self.booked if response_id is None or b.response_id != response_id]
        self.unreported_tokens = sum(b.tokens for b in unreported)
        self.unreported_usd = sum(b.usd for b in unreported)
        self.booked = []
        self.response_id = response_id
        return lost

    def details(self) -> dict[str, Any]:
        return {"attempt": self.attempt, "generated": self.generated, "response_id": self.response_id,
                "lost_before": self.lost_before,
                "unresolved": [{"attempt": u.attempt, "generated": u.generated, "response_id": u.response_id}
                               for u in self.unresolved]}
