"""The reserve rule of a step, written once: what a call sets aside for its prompt, and how much answer the rest
of its allowance grants, and the token allowance itself as one named quantity (`TokenAllowance`).

The generate activity plans its call by it, the control plane bounds what a node may book by it, and the
workflow words a budget shortfall by it, so the three never disagree on what a call costs. No I/O, no Temporal.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BeforeValidator, Field

from .limits import MAX_STORED_INT, reservation_margin


def _overdrawn_is_none_left(value: object) -> object:
    """An allowance below 0 (a budget overdrawn, which only an engine that overran its reservation does) leaves
    nothing to book: read as 0 rather than refused, since a payload refused here would stall the workflow that
    sent it, and what the task is short of is worded from its own budget (workflows/step_outcomes.py)."""
    return 0 if isinstance(value, int) and not isinstance(value, bool) and value < 0 else value


# The tokens a model call, or a round of a step's placements, may book at most, prompt included: what is left of
# the task's budget when the workflow asks for the call. The step's input (`LlmStepInput.token_allowance`) and
# the lease's limits (`StepLimits.token_allowance`) carry the same quantity; the activity and the control plane
# reserve against it by the rules below. Not the answer tokens a lease asks the pool for (`LeaseRequest.tokens`,
# the step's load on a replica).
TokenAllowance = Annotated[
    int,
    Field(
        ge=0, le=MAX_STORED_INT, description="tokens this call (or round of a step) may book at most, prompt included"
    ),
    BeforeValidator(_overdrawn_is_none_left),
]


def prompt_reserve(counted_tokens: int, exact: bool = False, continued_tokens: int = 0) -> int:
    """What a call sets aside for its prompt: the count, and the margin for what the count may miss."""
    return counted_tokens + reservation_margin(counted_tokens, exact=exact, continued_tokens=continued_tokens)


def answer_grant(room: int, allowance_left: TokenAllowance, prompt: int, usd_answer: int | None = None) -> int:
    """Answer tokens a call may generate: its `room` (the step's max_tokens, less the cut text it goes on from),
    no more than the token allowance leaves after its `prompt` reserve, nor than its dollars pay for
    (`usd_answer`). `allowance_left` is the call's allowance less what its round booked or holds back already
    (below 0 when those overdraw it). Below 0 when the allowance cannot even pay for the prompt."""
    grant = min(room, allowance_left - prompt)
    return grant if usd_answer is None else min(grant, usd_answer)


def tokens_short(prompt: int, answer: int, allowance_left: TokenAllowance) -> int:
    """Tokens the allowance lacks for a call that reserves `prompt` and asks for `answer` (0 or less: none)."""
    return prompt + answer - allowance_left
