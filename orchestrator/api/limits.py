"""Limits on what one caller can ask of the server: body size, and task submissions per key.

Request bodies: the largest legitimate body is an agent spec whose instructions are at their limit
(200 k characters, up to 4 bytes each in UTF-8) plus tool schemas, well under 2 MiB; a body
far above that is a mistake or an attack and is refused before it is read into memory.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass

from starlette.types import ASGIApp, Message, Receive, Scope, Send

MAX_BODY_BYTES = 4 * 1024 * 1024
MAX_BUCKETS = 10_000


class BodySizeLimit:
    def __init__(self, app: ASGIApp, max_bytes: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        length = headers.get(b"content-length")
        if length is not None:
            try:
                too_large = int(length) > self.max_bytes
            except ValueError:
                too_large = False
            if too_large:
                await self._refuse(send)
                return
            await self.app(scope, receive, send)
            return
        # No length given (chunked): read up to the limit, then replay what was read.
        buffered: list[Message] = []
        size = 0
        while True:
            message = await receive()
            buffered.append(message)
            if message["type"] != "http.request":
                break
            size += len(message.get("body", b""))
            if size > self.max_bytes:
                await self._refuse(send)
                return
            if not message.get("more_body", False):
                break

        async def replay() -> Message:
            return buffered.pop(0) if buffered else await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, send: Send) -> None:
        body = json.dumps(
            {
                "error": {
                    "code": "too_large",
                    "message": f"the request body is larger than {self.max_bytes} bytes",
                    "field": None,
                }
            }
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": body})


@dataclass
class _Bucket:
    tokens: float
    at: float


class KeyRateLimit:
    """A token bucket per API key: `burst` submissions at once, then `per_s` a second.

    Per key, so one runaway client (an agent key in a loop) cannot starve every other
    tenant's submissions. Held in the server's memory: each API replica limits on its own,
    which bounds a key at replicas x rate, enough to stop a loop. The burst is sized for a
    batch submitted at once (the load benchmark sends 1000 tasks together).
    """

    def __init__(self, per_s: float, burst: int) -> None:
        self.per_s = per_s
        self.burst = burst
        self._buckets: dict[str, _Bucket] = {}
        self._lock = threading.Lock()

    def take(self, key_id: str) -> float | None:
        """Take one submission for `key_id`; None when allowed, else the seconds until one is."""
        with self._lock:
            bucket = self._refilled(key_id)
            if bucket.tokens >= 1:
                bucket.tokens -= 1
                return None
            return (1 - bucket.tokens) / self.per_s if self.per_s > 0 else 60.0

    def give_back(self, key_id: str) -> None:
        """Return one `take` that turned out not to count (a sign-in that succeeded, when only failures do)."""
        with self._lock:
            bucket = self._refilled(key_id)
            bucket.tokens = min(float(self.burst), bucket.tokens + 1)

    def exhausted(self, key_id: str) -> bool:
        """Whether the next `take` would be refused, without taking anything."""
        with self._lock:
            return self._refilled(key_id).tokens < 1

    def _refilled(self, key_id: str) -> _Bucket:
        now = time.monotonic()
        bucket = self._buckets.get(key_id)
        if bucket is None and len(self._buckets) >= MAX_BUCKETS:
            self._forget_full(now)
        if bucket is None:
            bucket = self._buckets[key_id] = _Bucket(tokens=float(self.burst), at=now)
        bucket.tokens = min(float(self.burst), bucket.tokens + (now - bucket.at) * self.per_s)
        bucket.at = now
        return bucket

    def _forget_full(self, now: float) -> None:
        """Drop the buckets that have filled up again: a full bucket and no bucket mean the same, and
        callers can invent ids (a failed sign-in names any key it likes), so the map must not grow forever."""
        for key_id, bucket in list(self._buckets.items()):
            if bucket.tokens + (now - bucket.at) * self.per_s >= self.burst:
                del self._buckets[key_id]
