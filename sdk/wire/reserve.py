"""The reserve rule of a step, written once: what a call sets aside for its prompt, and how much answer the rest
of its allowance grants.

The generate activity plans its call by it, the control plane bounds what a node may book by it, and the
workflow words a budget shortfall by it, so the three never disagree on what a call costs. No I/O, no Temporal.
"""

from __future__ import annotations

from .limits import reservation_margin


def prompt_reserve(counted_tokens: int, exact: bool = False, continued_tokens: int = 0) -> int:
    """What a call sets aside for its prompt: the count, and the margin for what the count may miss."""
    return counted_tokens + reservation_margin(counted_tokens, exact=exact, continued_tokens=continued_tokens)


def answer_grant(room: int, allowance_left: int, prompt: int, usd_answer: int | None = None) -> int:
    """Answer tokens a call may generate: its `room` (the step's max_tokens, less the cut text it goes on from),
    no more than the token allowance leaves after its `prompt` reserve, nor than its dollars pay for
    (`usd_answer`). Below 0 when the allowance cannot even pay for the prompt."""
    grant = min(room, allowance_left - prompt)
    return grant if usd_answer is None else min(grant, usd_answer)


def tokens_short(prompt: int, answer: int, allowance_left: int) -> int:
    """Tokens the allowance lacks for a call that reserves `prompt` and asks for `answer` (0 or less: none)."""
    return prompt + answer - allowance_left
