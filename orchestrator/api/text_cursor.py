"""What a client holds of one step's text, and what to send it next so that it holds the step's text exactly.

A step's text can come from several sources in turn: the attempt writing it, the attempt that continues it on
another node after a cut (which goes on from the text its last heartbeat carried: possibly less than the
client already has), an attempt that starts over, and, once the step is finished, the stored step. Each
source says "my text, from offset o, is t"; the cursor compares that with what the client holds and answers
with the deltas that extend it and, where the source's text departs from it, a `Reset` first: the client
drops what it holds from that offset on. So the concatenation of the deltas after the last reset is always a
prefix of the current source's text, and equals the stored step's text once that is settled. No I/O here.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Delta:
    """Text to append; `offset` is where it starts in the step's text (the length the client holds)."""

    offset: int
    text: str


@dataclass(frozen=True)
class Reset:
    """The client drops what it holds of the step's text from `offset` on; deltas go on from there."""

    offset: int


Change = Delta | Reset


class TextCursor:
    """One step's text as a client holds it (`held`: what was sent so far). `skip`: the client's first `skip`
    characters came from elsewhere (a caller resuming); they are taken from the first source, not sent again."""

    def __init__(self, held: str = "", skip: int = 0) -> None:
        self.held = held
        self._skip = skip

    def take(self, offset: int, text: str) -> list[Change]:
        """The source's text at `offset` is `text`: what to send. Text past a gap (an offset beyond what the
        client holds) cannot be placed and is left for a later source to fill."""
        if offset > len(self.held) or not text:
            return []
        ours = self.held[offset : offset + len(text)]
        same = _common_length(ours, text)
        changes: list[Change] = []
        if same < len(ours):  # the source departs from what the client holds
            changes.append(self._cut(offset + same))
        new = text[len(self.held) - offset :]
        if not new:
            return changes
        start = len(self.held)
        self.held += new
        unseen = min(len(new), max(0, self._skip - start))  # characters the resuming caller already has
        if unseen < len(new):
            changes.append(Delta(start + unseen, new[unseen:]))
        return changes

    def end(self, length: int) -> list[Change]:
        """The source's whole text is `length` characters: the client must not hold more."""
        return [self._cut(length)] if length < len(self.held) else []

    def settle(self, text: str) -> list[Change]:
        """The step's final text: what makes the client hold exactly it."""
        return self.take(0, text) + self.end(len(text)) if text else self.end(0)

    def _cut(self, offset: int) -> Reset:
        self.held = self.held[:offset]
        self._skip = min(self._skip, offset)  # below the cut the caller's own copy is void too
        return Reset(offset)


def _common_length(a: str, b: str) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n
