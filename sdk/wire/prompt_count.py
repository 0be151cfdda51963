"""A prompt's token count, and the protocol of a model's own counting, as the reserve rule reads them.

Counting itself is I/O of a kind (litellm's gpt-4o tokenizer in activities/step/tokens.py, a model's own
tokenizer and chat template in orchestrator/tokenizers/); what a count means for a reservation is not, so it
lives here beside the reserve rule (reserve.py) that the activity and the control plane both apply.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from .reserve import prompt_reserve


@dataclass(frozen=True)
class PromptCount:
    """A prompt's tokens, and whether they are the engine's own count (the model's tokenizer and template)."""

    tokens: int
    exact: bool

    def reserved(self, continued_tokens: int = 0) -> int:
        """What a call with this prompt sets aside for it: the count and the margin for what is not exact."""
        return prompt_reserve(self.tokens, exact=self.exact, continued_tokens=continued_tokens)


class PromptTokenizer(Protocol):
    """A model's own prompt counting, as its engine renders and tokenizes a chat request."""

    def count_prompt(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> PromptCount: ...
