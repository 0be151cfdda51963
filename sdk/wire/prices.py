"""What a model call costs, and how many answer tokens a dollar allowance still pays for.

One module for both places that price calls: the LLM step (beside the store, or on a node for its
own reckoning) and the control plane's step routes, which price a node's call themselves from the
catalogue so that no node ever sets what a tenant pays. Tokens of attempts that died (lost, or
kept and continued from) were generated, so they are priced as completion tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

# An allowance without a completion price (a free model) pays for any answer; this stands for "any".
UNLIMITED_TOKENS = 1 << 30


@dataclass(frozen=True)
class Prices:
    """US dollars per token."""

    prompt: float
    completion: float

    @classmethod
    def per_million(cls, prompt: float | None, completion: float | None) -> Prices | None:
        """From catalogue prices per million tokens; None when either is unknown."""
        if prompt is None or completion is None:
            return None
        return cls(prompt / 1e6, completion / 1e6)

    def call(self, prompt_tokens: int, completion_tokens: int) -> float:
        return prompt_tokens * self.prompt + completion_tokens * self.completion

    def affordable_completion(self, usd_allowance: float, prompt_tokens: int) -> int:
        """Answer tokens `usd_allowance` pays for after a prompt of `prompt_tokens`."""
        if self.completion <= 0:
            return UNLIMITED_TOKENS
        return max(0, int((usd_allowance - prompt_tokens * self.prompt) / self.completion))


def call_cost(prices: Prices | None, prompt_tokens: int, completion_tokens: int) -> float:
    return prices.call(prompt_tokens, completion_tokens) if prices is not None else 0.0


def generated_cost(prices: Prices | None, tokens: int) -> float:
    """What tokens an attempt generated before it died cost: completion tokens, delivered or not."""
    return tokens * prices.completion if prices is not None else 0.0
