"""Reserve: size a step's call to what its allowance (and, on the fleet, the control plane's grant) pays for.

The prompt is counted by the model's own tokenizer where the route has one (exact, as the control plane
counts it too), else as OpenAI counts it with a margin for the engine's template. The kept text a
continuation re-sends is counted in neither the reservation nor the prompt charged: it is paid for once, as
kept tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sdk import CheckpointRef
from sdk.wire.attempts import Attempts
from sdk.wire.contracts import LlmStepInput
from sdk.wire.limits import MIN_ANSWER_TOKENS
from sdk.wire.prices import Prices, generated_cost
from sdk.wire.reserve import answer_grant
from sdk.wire.step_call import ModelRoute, StepRef

from .ports import StepBooks
from .tokens import count_prompt, sendable_tools


@dataclass(frozen=True)
class PlannedCall:
    """A call the budget allows, as planned before it is made."""

    checkpoint: CheckpointRef
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    max_tokens: int
    shortfall_usd: float | None
    budget_limited: bool  # the allowance (not the step's own answer room) set max_tokens

    @property
    def affordable(self) -> bool:
        """The answer the call asks for fits the allowance, or at least MIN_ANSWER_TOKENS of it does: a call that
        asks for fewer (an own loop's `max_tokens: 5`) is not short of budget when it can have all of them."""
        return not self.budget_limited or self.max_tokens >= MIN_ANSWER_TOKENS


def plan_call(
    books: StepBooks, inp: LlmStepInput, step: StepRef, route: ModelRoute, progress: Attempts, prices: Prices | None
) -> PlannedCall:
    """Read the conversation (through the books: a node gets only the task's current checkpoint) and size the
    answer: the step's room, less what the allowance must keep for the prompt and for dead attempts."""
    prepared = books.prepare(step, inp.checkpoint, inp.pending, inp.instructions, inp.tools)
    messages = [m.to_openai() for m in prepared.messages]
    if inp.instructions:
        messages.insert(0, {"role": "system", "content": inp.instructions})
    tools = sendable_tools(inp.tools) or None
    continued = progress.prefix_tokens if progress.prefix else 0
    reserve = count_prompt(messages, tools, route.tokenizer).reserved(continued)
    room = inp.max_tokens - progress.prefix_tokens  # a continuation's answer room is what the cut text left
    usd_answer, shortfall_usd = None, None
    if inp.usd_allowance is not None and prices is not None:
        usd_left = inp.usd_allowance - held_back_usd(progress, prices)
        usd_answer = prices.affordable_completion(usd_left, reserve)
        needed_usd = prices.call(reserve, MIN_ANSWER_TOKENS)
        shortfall_usd = needed_usd - usd_left if needed_usd > usd_left else None
    max_tokens = answer_grant(room, inp.token_allowance - progress.held_back, reserve, usd_answer)
    if prepared.max_tokens is not None:  # what the control plane granted, by the same rule
        max_tokens = min(max_tokens, prepared.max_tokens)
    if progress.prefix:
        messages.append({"role": "assistant", "content": progress.prefix})
    return PlannedCall(
        prepared.checkpoint, messages, tools, max_tokens, shortfall_usd, budget_limited=max_tokens < room
    )


def held_back_usd(progress: Attempts, prices: Prices) -> float:
    """Dollars the allowance must not give this attempt: what dead attempts generated, and replies booked."""
    booked_tokens = sum(b.tokens for b in progress.booked)
    return generated_cost(prices, progress.held_back - booked_tokens) + sum(b.usd for b in progress.booked)
