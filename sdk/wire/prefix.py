"""The text a cut generation left, and whether a step continues it: read by the workflow (to book what the cut
kept) and by the generate activity (to go on from it), so one rule decides both.

No I/O and no Temporal here: workflows import it without loading any activity.
"""

from __future__ import annotations

from dataclasses import dataclass

from .contracts import GenerationProgress
from .limits import MIN_ANSWER_TOKENS


@dataclass(frozen=True)
class Prefix:
    """The text a cut generation had written (its own and what it continued), to be continued."""

    text: str
    tokens: int
    own_tokens: int  # written by the attempt that was cut; the rest was kept from earlier ones


def carried_prefix(progress: GenerationProgress | None) -> Prefix | None:
    """The prefix a generation's last heartbeat carries, if any."""
    if progress is None or not progress.prefix:
        return None
    return Prefix(progress.prefix, progress.prefix_tokens, progress.prefix_own)


def continuable(prefix: Prefix | None, max_tokens: int) -> bool:
    """Whether a new placement continues `prefix` rather than starting the reply over: only when
    the step's max_tokens leaves room for a real answer after it."""
    return prefix is not None and prefix.tokens + MIN_ANSWER_TOKENS <= max_tokens
