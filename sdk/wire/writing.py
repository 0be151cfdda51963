"""A running generation's text, as a node serves it to the control plane while it is written.

The API follows a step's text from the node that generates it: `GET <peer_url>/v1/peer/writing/<task>/<step>`
with `after` (a character offset) and a ticket in `WRITING_TICKET_HEADER`. The answer is newline-delimited
JSON, one `WritingLine` a line: the generation's attempt first, then each piece as the engine writes it, then
how the generation ended (or, with `follow=false`, that it is still writing).

A step's text is private to its task's tenant, so a node serves it only to a caller the control plane vouches
for: the ticket is an HMAC, keyed with the node secret's sha256 (what the control plane stores of it, and what
the node can compute from its secret), over the node, the task, the step and an expiry. No call back to the
control plane is needed to check it, so following a step costs no more than the stream itself; a ticket for
another node, task or step, or an expired one, is refused.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import time
from typing import Literal

from pydantic import BaseModel

WRITING_PATH = "/v1/peer/writing"  # + "/<task_id>/<step>" on a node's peer server
WRITING_TICKET_HEADER = "X-Berth-Writing-Ticket"
# A ticket is checked once, when the stream opens; a minute covers a slow connect, and a replayed ticket
# reads only the one step it names for that minute.
WRITING_TICKET_TTL_S = 60
# While a generation is silent (a long prefill) the node sends an empty line (`{}`) this often, so the reader
# can tell silence from a lost node (three missed).
WRITING_KEEPALIVE_S = 2.0
_TICKET = re.compile(r"^(\d{1,12})\.([0-9a-f]{64})$")

Ending = Literal["finished", "cut", "writing"]


class WritingLine(BaseModel):
    """One line of the stream. `attempt` (first line): which attempt of the step writes, and from which
    offset on its own text starts (before it: the cut text it continues). A piece: `text` at `offset` of the
    step's text. The last line: `end` (finished, cut, or still writing for a one-shot read) and the text's
    `length` then."""

    attempt: int | None = None
    base: int | None = None
    offset: int | None = None
    text: str | None = None
    end: Ending | None = None
    length: int | None = None


def writing_key(node_secret: str) -> str:
    """The key of a node's writing tickets: its secret's sha256, as the control plane stores it."""
    return hashlib.sha256(node_secret.encode()).hexdigest()


def mint_writing_ticket(key: str, node_id: str, task_id: str, step: int, now: float | None = None) -> str:
    """A ticket to read step `step` of `task_id` on node `node_id`, for WRITING_TICKET_TTL_S."""
    expires = int((now if now is not None else time.time()) + WRITING_TICKET_TTL_S)
    return f"{expires}.{_mac(key, node_id, task_id, step, expires)}"


def writing_ticket_allows(
    ticket: str, key: str, node_id: str, task_id: str, step: int, now: float | None = None
) -> bool:
    """Whether `ticket` was minted with `key` for this very node, task and step, and has not expired."""
    match = _TICKET.match(ticket)
    if match is None or not key:
        return False
    expires = int(match.group(1))
    if expires < (now if now is not None else time.time()):
        return False
    return hmac.compare_digest(match.group(2), _mac(key, node_id, task_id, step, expires))


def _mac(key: str, node_id: str, task_id: str, step: int, expires: int) -> str:
    # NUL cannot occur in a node or task id, so no two (node, task, step, expiry) sign the same bytes.
    message = "\0".join((node_id, task_id, str(step), str(expires))).encode()
    return hmac.new(key.encode(), message, hashlib.sha256).hexdigest()
