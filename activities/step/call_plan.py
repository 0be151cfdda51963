"""Reserve: read a step's conversation and count its prompt, then size its call by the core's rule.

The prompt is counted by the model's own tokenizer where the route has one (exact, as the control plane
counts it too), else as OpenAI counts it with a margin for the engine's template. The kept text a
continuation re-sends is counted in neither the reservation nor the prompt charged: it is paid for once, as
kept tokens. How much answer the allowance (and, on the fleet, the control plane's grant) pays for is decided
by sdk/wire/answer_size.py, with no I/O; this module does the reading and the counting around it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sdk import CheckpointRef
from sdk.wire.answer_size import AnswerSize, size_answer
from sdk.wire.attempts import Attempts
from sdk.wire.contracts import LlmStepInput
from sdk.wire.prices import Prices
from sdk.wire.step_call import ModelRoute, StepRef

from .ports import StepBooks
from .tokens import count_prompt, sendable_tools


@dataclass(frozen=True)
class PlannedCall:
    """A call as planned before it is made: the conversation and tools it sends, and the answer it may ask for."""

    checkpoint: CheckpointRef
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    answer: AnswerSize


def plan_call(
    books: StepBooks, inp: LlmStepInput, step: StepRef, route: ModelRoute, progress: Attempts, prices: Prices | None
) -> PlannedCall:
    """Read the conversation (through the books: a node gets only the task's current checkpoint), count its prompt
    and size the answer: the step's room, less what the allowance must keep for the prompt and for dead attempts."""
    prepared = books.prepare(step, inp.checkpoint, inp.pending, inp.instructions, inp.tools, attempt=progress.attempt)
    messages = [m.to_openai() for m in prepared.messages]
    if inp.instructions:
        messages.insert(0, {"role": "system", "content": inp.instructions})
    tools = sendable_tools(inp.tools) or None
    continued = progress.prefix_tokens if progress.prefix else 0
    reserve = count_prompt(messages, tools, route.tokenizer).reserved(continued)
    room = inp.max_tokens - progress.prefix_tokens  # a continuation's answer room is what the cut text left
    answer = size_answer(
        room, inp.token_allowance, inp.usd_allowance, reserve, progress, prices, granted=prepared.max_tokens
    )
    if progress.prefix:
        messages.append({"role": "assistant", "content": progress.prefix})
    return PlannedCall(prepared.checkpoint, messages, tools, answer)
