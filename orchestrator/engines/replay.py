"""Idempotent generation: a request that repeats a finished one's Idempotency-Key gets the
same reply again instead of a new generation.

A client that dies between the engine finishing a reply and recording it would otherwise
retry and pay for the same step twice; with the key, the retry receives the finished reply
(same id, same usage) and the engine counts it once. Berth's LLM step sends one key per
task step. A reply is replayed only for the same conversation (model, messages, tools; what else
counts is the OpenAI face's `_same_request`) and only if it fits the retry's max_tokens, which may be
smaller: replaying a longer reply would spend more than the retry's budget allows.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from typing import Any, Generic, TypeVar

IDEMPOTENCY_HEADER = "Idempotency-Key"
REMEMBERED = 4096  # finished replies kept; a retry comes seconds to minutes later, not thousands of steps later

T = TypeVar("T")


def fingerprint(model: str, messages: Any, tools: Any) -> str:
    """What makes two requests the same generation, whatever their max_tokens."""
    body = json.dumps([model, messages, tools], sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(body.encode()).hexdigest()


class FinishedReplies(Generic[T]):
    """The last REMEMBERED finished replies by key, oldest forgotten first."""

    def __init__(self, size: int = REMEMBERED) -> None:
        self._size = size
        self._replies: OrderedDict[str, tuple[str, int, T]] = OrderedDict()

    def get(self, key: str | None, request_fingerprint: str, max_tokens: int) -> T | None:
        """The finished reply to replay for this request, if there is one that fits."""
        found = self._replies.get(key) if key is not None else None
        if key is None or found is None:
            return None
        stored_fingerprint, completion_tokens, reply = found
        if stored_fingerprint != request_fingerprint or completion_tokens > max_tokens:
            return None
        self._replies.move_to_end(key)
        return reply

    def remember(self, key: str | None, request_fingerprint: str, completion_tokens: int, reply: T) -> None:
        if key is None:
            return
        self._replies[key] = (request_fingerprint, completion_tokens, reply)
        self._replies.move_to_end(key)
        while len(self._replies) > self._size:
            self._replies.popitem(last=False)
