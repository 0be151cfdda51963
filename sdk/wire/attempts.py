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

On the GPU fleet a third outcome saves the work: the heartbeats also carry the text written
so far (the *prefix*), and the attempt that takes the step over on another node asks its
engine to go on writing that text (vLLM's `continue_final_message`). The dead attempts'
tokens in the prefix are then *kept* (booked as such: paid once, part of the reply) and
only what the last heartbeat did not carry is lost.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .contracts import GenerationProgress, UnresolvedAttempt
from .limits import MAX_PREFIX_CHARS
from .prefix import Prefix, carried_prefix


@dataclass(frozen=True)
class DeadAttempt:
    attempt: int
    generated: int
    response_id: str | None
    kept: int = 0  # of `generated`, the tokens the reply continues from (the rest are lost)


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
    kept_before: int = 0  # tokens of dead attempts this one continues (booked "kept", charged with the step)
    carried: Prefix | None = None  # what the last dead attempt had written, until this one decides
    prefix: str = ""  # the text this attempt continues
    prefix_tokens: int = 0
    written: list[str] = field(default_factory=list)  # this attempt's text, while it can still be kept
    written_tokens: int = 0
    written_chars: int = 0
    keeps_writing: bool = True  # False once its output is no longer plain text within MAX_PREFIX_CHARS
    unresolved: list[DeadAttempt] = field(default_factory=list)
    booked: list[BookedAttempt] = field(default_factory=list)
    replayed: bool = False  # this attempt's reply is one an earlier attempt already booked
    unreported_tokens: int = 0
    unreported_usd: float = 0.0

    @classmethod
    def resume(cls, attempt: int, last: GenerationProgress | None) -> Attempts:
        """This attempt's view, from the progress the previous attempt last sent (if any)."""
        if last is None or last.attempt == attempt:
            return cls(attempt)
        unresolved = [DeadAttempt(u.attempt, u.generated, u.response_id) for u in last.unresolved]
        if last.generated > 0:
            unresolved.append(DeadAttempt(last.attempt, last.generated, last.response_id))
        return cls(
            attempt,
            lost_before=last.lost_before,
            kept_before=last.kept_before,
            carried=carried_prefix(last),
            unresolved=unresolved,
        )

    def continue_prefix(self) -> list[DeadAttempt]:
        """Take the carried prefix over: every dead attempt is settled now (a continuation is a new
        request, so no engine will replay their replies); returns them with what each keeps."""
        assert self.carried is not None
        prefix, self.carried = self.carried, None
        last = self.unresolved[-1].attempt if self.unresolved else None
        dead = [
            DeadAttempt(
                u.attempt,
                u.generated,
                u.response_id,
                kept=min(prefix.own_tokens, u.generated) if u.attempt == last else 0,
            )
            for u in self.unresolved
        ]
        self.unresolved = []
        self.kept_before += sum(u.kept for u in dead)
        self.lost_before += sum(u.generated - u.kept for u in dead)
        self.prefix, self.prefix_tokens = prefix.text, prefix.tokens
        return dead

    def drop_prefix(self) -> None:
        """Start the reply over (no room after the prefix, or an engine that cannot continue)."""
        self.carried = None

    def wrote(self, text: str, tokens: int, plain: bool) -> None:
        """Count a streamed chunk. Its text is kept for a continuation while the reply is plain text:
        a reply that turns into tool calls is started over (no engine continues a half-made call)."""
        self.generated += tokens
        if not self.keeps_writing:
            return
        if not plain:
            self.keeps_writing = False
            self.written, self.written_tokens, self.written_chars = [], 0, 0
        elif len(self.prefix) + self.written_chars + len(text) > MAX_PREFIX_CHARS:
            self.keeps_writing = False
        else:
            self.written.append(text)
            self.written_tokens += tokens
            self.written_chars += len(text)

    @property
    def text(self) -> str:
        """The reply's text so far: the prefix it continues, then what this attempt wrote."""
        return self.prefix + "".join(self.written)

    @property
    def held_back(self) -> int:
        """Tokens the allowance must not give to this attempt: lost, kept, or possibly lost."""
        return (
            self.lost_before
            + self.kept_before
            + sum(u.generated for u in self.unresolved)
            + sum(b.tokens for b in self.booked)
        )

    def resolve(self, response_id: str | None) -> list[DeadAttempt]:
        """Settle the dead attempts once this attempt's reply id is known (None: no reply will come).

        Returns the ones whose tokens are lost; a dead attempt with the same reply id is the
        engine's replay of that very reply, so its tokens reach this attempt instead, and one that
        booked its reply before it died is not lost either: its tokens are in that booked reply.
        """
        settled = {b.attempt for b in self.booked}
        lost = [
            u
            for u in self.unresolved
            if (response_id is None or u.response_id != response_id) and u.attempt not in settled
        ]
        self.lost_before += sum(u.generated for u in lost)
        self.unresolved = []
        self.replayed = response_id is not None and any(b.response_id == response_id for b in self.booked)
        unreported = [b for b in self.booked if response_id is None or b.response_id != response_id]
        self.unreported_tokens = sum(b.tokens for b in unreported)
        self.unreported_usd = sum(b.usd for b in unreported)
        self.booked = []
        self.response_id = response_id
        return lost

    def progress(self) -> GenerationProgress:
        """What the next heartbeat carries."""
        carried = bool(self.prefix or self.written)
        return GenerationProgress(
            attempt=self.attempt,
            generated=self.generated,
            response_id=self.response_id,
            lost_before=self.lost_before,
            kept_before=self.kept_before,
            unresolved=[
                UnresolvedAttempt(attempt=u.attempt, generated=u.generated, response_id=u.response_id)
                for u in self.unresolved
            ],
            prefix=self.text if carried else "",
            prefix_tokens=self.prefix_tokens + self.written_tokens if carried else 0,
            prefix_own=self.written_tokens if carried else 0,
        )
