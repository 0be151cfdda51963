"""Server-Sent Events as the task event stream uses them.

The server sends one SSE message per TaskEvent (`event: <kind>`, `id: <seq>`, `data: <json>`)
and, once the task is final and its log drained, one `event: end` message. The end marker
is what tells a client the stream closed on purpose; a stream that closes without it was
cut, and the client reconnects with `Last-Event-ID`. A `revoked` message ends a stream whose
API key was revoked while it ran: reconnecting would be refused.
"""

from __future__ import annotations

from dataclasses import dataclass

END_EVENT = "end"
REVOKED_EVENT = "revoked"
TOKEN_DELTA_EVENT = "token_delta"  # a chunk of the text a generation writes, streamed to a watching client
# The step's text the client holds is void from `offset` on (an attempt that took the step over wrote otherwise);
# the next deltas go on from there.
TOKEN_RESET_EVENT = "token_reset"


@dataclass(frozen=True)
class SseMessage:
    event: str
    data: str
    id: str | None


class SseParser:
    """Feeds lines (without their line ending) and returns a message at each blank line.

    Follows the WHATWG event-stream rules Berth needs: `:` comments (pings) are skipped,
    `data` lines join with newlines, one space after the colon is dropped.
    """

    def __init__(self) -> None:
        self._event = ""
        self._data: list[str] = []
        self._id: str | None = None

    def feed(self, line: str) -> SseMessage | None:
        if line == "":
            return self._dispatch()
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        elif name == "id" and "\0" not in value:
            self._id = value
        return None

    def _dispatch(self) -> SseMessage | None:
        if not self._data and not self._event:
            self._id = None
            return None
        message = SseMessage(event=self._event or "message", data="\n".join(self._data), id=self._id)
        self._event, self._data, self._id = "", [], None
        return message
