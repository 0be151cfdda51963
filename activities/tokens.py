"""Prompt token counting, the one function reservations and the simulated engine agree on.

litellm is imported here lazily: importing it costs seconds and it must never reach
workflow code. Counting uses the gpt-4o tokenizer (tiktoken o200k, shipped inside litellm,
so no download) for every model: self-hosted engines report their own counts, which the
ledger records, and the reservation margin below covers the difference.
"""

from __future__ import annotations

import copy
import functools
import logging
import os
from typing import Any

COUNTING_MODEL = "gpt-4o"


def _litellm() -> Any:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import litellm

    if not getattr(litellm, "_berth_quiet", False):
        # litellm prices every response itself and, for self-hosted names it has no tokenizer
        # for, logs a fallback warning each minute; Berth prices calls from its catalogue.
        litellm.suppress_debug_info = True
        logging.getLogger("LiteLLM").setLevel(logging.ERROR)
        litellm._berth_quiet = True
    return litellm


def count_prompt_tokens(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> int:
    """Tokens of a chat request as OpenAI counts them (messages, role overhead and tool schemas)."""
    return int(_litellm().token_counter(model=COUNTING_MODEL, messages=messages, tools=tools or None))


def count_text_tokens(text: str) -> int:
    return int(_litellm().token_counter(model=COUNTING_MODEL, text=text, count_response_tokens=True))


@functools.lru_cache(maxsize=1)
def _encoding() -> Any:
    """gpt-4o's encoding (o200k), the one token_counter uses; litellm ships it, so no download."""
    _litellm()
    import litellm.litellm_core_utils.default_encoding  # noqa: F401  points tiktoken at litellm's bundled files
    import tiktoken

    return tiktoken.encoding_for_model(COUNTING_MODEL)


def encode(text: str) -> list[int]:
    return list(_encoding().encode(text, disallowed_special=()))


def decode(tokens: list[int]) -> str:
    return str(_encoding().decode(tokens))


def sendable_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Tool schemas as litellm will send them to an OpenAI-compatible server.

    litellm drops `additionalProperties: false` and `strict` on the way out for some routes;
    dropping them before counting keeps Berth's count equal to the engine's.
    """
    from litellm.utils import remove_additional_properties, remove_strict_from_schema

    return remove_strict_from_schema(remove_additional_properties(copy.deepcopy(tools)))


def reservation_margin(counted_prompt_tokens: int) -> int:
    """Slack for engines whose chat template counts a little more than OpenAI's formula (≈2% + 8)."""
    return counted_prompt_tokens // 50 + 8
