"""The conversation of a task whose loop runs outside Berth, as a chain of hashes both ends compute alike.

An author's own loop (an OpenAI Agents SDK run, any OpenAI client) sends its whole conversation with every
model call. The API sends the workflow only what is new, and the workflow checks that the rest is what it
holds by hash: so history carries each message once, and a loop that re-runs after a crash is recognised call
by call (its requests hash as before) and given the replies it had, without a token spent again.

The hash reads only what a model sees, in one spelling: a client that sends an empty content as null, or
drops a tool message's name, still matches.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Any

from .._messages import Message

EMPTY_CHAIN = hashlib.sha256(b"berth transcript").hexdigest()


def _canonical(message: Message) -> bytes:
    calls = [[c.id, c.name, c.arguments] for c in message.tool_calls or ()]
    body = [message.role, message.content or "", calls, message.tool_call_id or ""]
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def extend(chain: str, message: Message) -> str:
    """The chain's hash after one more message."""
    return hashlib.sha256(chain.encode() + b"\n" + _canonical(message)).hexdigest()


def chain_of(messages: Iterable[Message], start: str = EMPTY_CHAIN) -> list[str]:
    """The hash after each message, in order (the conversation of n messages is named by the n-th)."""
    hashes, chain = [], start
    for message in messages:
        chain = extend(chain, message)
        hashes.append(chain)
    return hashes


def canonical_json(value: Any) -> str:
    """One spelling of a JSON value (keys sorted, no spaces), so both ends of a wire hash it alike."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)


def digest(value: Any) -> str:
    """sha256 of the value's canonical JSON."""
    return hashlib.sha256(canonical_json(value).encode()).hexdigest()


def request_hash(chain: str, instructions: str | None, tools: list[dict[str, Any]], settings: dict[str, Any]) -> str:
    """What names one model call: its conversation, its instructions, the tools it offers and how it samples."""
    return digest([chain, instructions or "", tools, settings])
