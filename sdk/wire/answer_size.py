"""How many answer tokens a step's call may ask for, once its prompt is counted: the planning rule of the LLM step.

The answer is the step's room (its max_tokens, less the cut text a continuation goes on from), no more than the
token allowance leaves after the prompt's reserve and what dead attempts hold back, nor than the dollar allowance
pays for (reserve.py `answer_grant`), nor than what the control plane granted a GPU node by that same rule. A
call whose answer the budget, not its room, cut below MIN_ANSWER_TOKENS is not worth making: the step reports
the shortfall instead. Pure: the activity counts the prompt and reads the grant, then asks this.
"""

from __future__ import annotations

from dataclasses import dataclass

from .attempts import Attempts
from .limits import MIN_ANSWER_TOKENS
from .prices import Prices, generated_cost
from .reserve import TokenAllowance, answer_grant


@dataclass(frozen=True)
class AnswerSize:
    """The answer a call may ask for, and what the dollar allowance lacks for a minimum one."""

    max_tokens: int
    shortfall_usd: float | None
    budget_limited: bool  # the allowance (not the step's own answer room) set max_tokens

    @property
    def affordable(self) -> bool:
        """The answer the call asks for fits the allowance, or at least MIN_ANSWER_TOKENS of it does: a call that
        asks for fewer (an own loop's `max_tokens: 5`) is not short of budget when it can have all of them."""
        return not self.budget_limited or self.max_tokens >= MIN_ANSWER_TOKENS


def size_answer(
    room: int,
    token_allowance: TokenAllowance,
    usd_allowance: float | None,
    prompt_reserve: int,
    progress: Attempts,
    prices: Prices | None,
    granted: int | None = None,
) -> AnswerSize:
    """Size a call that reserved `prompt_reserve` for its prompt: `room` is the step's answer room, `granted` what
    the control plane granted (a GPU node's step; None beside the store)."""
    usd_answer, shortfall_usd = None, None
    if usd_allowance is not None and prices is not None:
        usd_left = usd_allowance - held_back_usd(progress, prices)
        usd_answer = prices.affordable_completion(usd_left, prompt_reserve)
        needed_usd = prices.call(prompt_reserve, MIN_ANSWER_TOKENS)
        shortfall_usd = needed_usd - usd_left if needed_usd > usd_left else None
    max_tokens = answer_grant(room, token_allowance - progress.held_back, prompt_reserve, usd_answer)
    if granted is not None:
        max_tokens = min(max_tokens, granted)
    return AnswerSize(max_tokens, shortfall_usd, budget_limited=max_tokens < room)


def held_back_usd(progress: Attempts, prices: Prices) -> float:
    """Dollars the allowance must not give this attempt: what dead attempts generated, and replies booked."""
    booked_tokens = sum(b.tokens for b in progress.booked)
    return generated_cost(prices, progress.held_back - booked_tokens) + sum(b.usd for b in progress.booked)
