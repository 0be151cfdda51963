"""Prompt token counting, the one function reservations and the simulated engine agree on.

litellm is imported here lazily: importing it costs seconds and it must never reach
workflow code. Without a tokenizer of the model's own, counting uses the gpt-4o tokenizer
(tiktoken o200k, shipped inside litellm, so no download): hosted models, and simulated ones,
whose engine counts the same way. A self-hosted model with real weights is counted by its own
tokenizer and chat template (a `PromptTokenizer`, orchestrator/tokenizers/), exactly as its
engine counts; the reservation margin (sdk.wire.limits.reservation_margin) covers what is not exact.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import logging
import os
import pickle
import threading
from typing import Any

from sdk.wire.prompt_count import PromptCount, PromptTokenizer

COUNTING_MODEL = "gpt-4o"


# litellm's first import takes seconds, and two threads importing it at once (a warm-up and a request) can meet
# it half-initialised ("cannot import name ... partially initialized module"): the first import is taken alone.
_importing = threading.Lock()


def _litellm() -> Any:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    with _importing:
        import litellm
        import litellm.utils  # noqa: F401  (sendable_tools' helpers, imported under the same lock)

        if not getattr(litellm, "_berth_quiet", False):
            # litellm prices every response itself and, for self-hosted names it has no tokenizer
            # for, logs a fallback warning each minute; Berth prices calls from its catalogue.
            litellm.suppress_debug_info = True
            logging.getLogger("LiteLLM").setLevel(logging.ERROR)
            litellm._berth_quiet = True
    return litellm


def count_prompt(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None, tokenizer: PromptTokenizer | None = None
) -> PromptCount:
    """The prompt as reservations count it: by the model's own tokenizer when it has one (exact), else as
    OpenAI counts it (litellm's gpt-4o formula, which the margin covers)."""
    if tokenizer is not None:
        return tokenizer.count_prompt(messages, tools or None)
    return PromptCount(count_prompt_tokens(messages, tools), exact=False)


def count_prompt_tokens(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> int:
    """Tokens of a chat request as OpenAI counts them (messages, role overhead and tool schemas).

    Always equal to `litellm.token_counter(model="gpt-4o", messages=messages, tools=tools)`, but
    computed from remembered parts: litellm's count is a sum over messages, each counted on its
    own, plus one term for the tool schemas (and reply primer) that depends only on the tools and
    on whether any message is a system message. An agent's conversation grows by a message or two
    per step, so all but the newest messages are already known: a 200-message prompt costs about
    half a millisecond instead of ~8 (counted both by the LLM step and by the simulated engine).
    Messages that cannot be fingerprinted (not plain dicts, not picklable) are counted directly.
    """
    tools = tools or None
    if not all(type(m) is dict for m in messages):
        return _count_directly(messages, tools)
    try:
        total = sum(_message_tokens(m) for m in messages)
        has_system = any(m.get("role", None) == "system" for m in messages)
        return total + _request_tokens(tools, has_system)
    except (pickle.PicklingError, TypeError, AttributeError, RecursionError):
        return _count_directly(messages, tools)


def _count_directly(messages: list[Any], tools: list[dict[str, Any]] | None) -> int:
    return int(_litellm().token_counter(model=COUNTING_MODEL, messages=messages, tools=tools))


# Fingerprint (blake2b of the pickled value: exact types, so a tuple never passes for a list) ->
# tokens. Bounded; the oldest entries go first. Reads need no lock, evicting does.
_PART_CACHE_MAX = 50_000
_part_tokens: dict[bytes, int] = {}
_evicting = threading.Lock()


def _fingerprint(kind: bytes, value: Any) -> bytes:
    return hashlib.blake2b(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL), digest_size=16, person=kind).digest()


def _remember(key: bytes, tokens: int) -> int:
    _part_tokens[key] = tokens
    if len(_part_tokens) > _PART_CACHE_MAX:
        with _evicting:
            while len(_part_tokens) > _PART_CACHE_MAX:
                try:
                    del _part_tokens[next(iter(_part_tokens))]
                except (KeyError, StopIteration, RuntimeError):  # another thread evicted or resized meanwhile
                    break
    return tokens


def _message_tokens(message: dict[str, Any]) -> int:
    """One message's share of the prompt: its role overhead and fields, without the reply primer."""
    key = _fingerprint(b"message", message)
    known = _part_tokens.get(key)
    if known is not None:
        return known
    counted = _litellm().token_counter(model=COUNTING_MODEL, messages=[message], count_response_tokens=True)
    return _remember(key, int(counted))


def _request_tokens(tools: list[dict[str, Any]] | None, has_system: bool) -> int:
    """What the request adds to its messages: the reply primer and the tool schemas.

    litellm discounts the schemas a little when a system message is present, so this is
    measured on a one-message probe with or without a system message, as the request has.
    """
    key = _fingerprint(b"system" if has_system else b"no-system", tools)
    known = _part_tokens.get(key)
    if known is not None:
        return known
    probe = [{"role": "system" if has_system else "user", "content": ""}]
    litellm = _litellm()
    with_request = litellm.token_counter(model=COUNTING_MODEL, messages=probe, tools=tools)
    messages_only = litellm.token_counter(model=COUNTING_MODEL, messages=probe, count_response_tokens=True)
    return _remember(key, int(with_request) - int(messages_only))


def warm_up_counting() -> None:
    """Import litellm and load its tokenizer (seconds of CPU) before the first prompt is counted."""
    count_prompt_tokens([{"role": "user", "content": "warm up"}], None)


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
    utils = _litellm().utils
    return utils.remove_strict_from_schema(utils.remove_additional_properties(copy.deepcopy(tools)))
