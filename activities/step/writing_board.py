"""What each generation running in this process has written, held for readers who follow it as it grows.

The generate activity writes every text delta here the moment the engine emits it (llm_step.py); a node's
peer server serves it to the control plane (orchestrator/node/writing_route.py), and an API that shares its
process with the control worker reads it directly. So a watching client gets each delta as it is written,
not a heartbeat later, and the deltas never enter the workflow's history nor the store.

A generation is keyed by (task, step) and holds the step's whole text: the cut text it continues (its
`base` characters) and then its own. A finished or cut generation stays readable for FINISHED_KEEP_S, so
a reader that connects just after the end still gets the tail; after that, the stored step is the truth.
Writers and readers may run on different event loops (threads): readers are woken thread-safely.
"""

from __future__ import annotations

import asyncio
import bisect
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

from sdk.wire.writing import Ending

# Long enough for a reader that was connecting when the step ended (a ticket, a connect: well under a second)
# and for the API to notice a continuation on another node; short enough that a node holds little.
FINISHED_KEEP_S = 30.0


@dataclass(frozen=True)
class Piece:
    """`text` at character `offset` of the step's text."""

    offset: int
    text: str


class Generation:
    """One attempt's text of one step: the `base` characters it continues, then what it writes."""

    def __init__(self, task_id: str, step: int, attempt: int, continued: str) -> None:
        self.task_id, self.step, self.attempt = task_id, step, attempt
        self.base = len(continued)
        self._parts: list[str] = [continued] if continued else []
        self._starts: list[int] = [0] if continued else []
        self.length = self.base
        self.ending: Ending = "writing"
        self.ended_at: float | None = None
        self._lock = threading.Lock()
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []

    def write(self, text: str) -> None:
        if not text:
            return
        with self._lock:
            self._starts.append(self.length)
            self._parts.append(text)
            self.length += len(text)
        self._wake()

    def end(self, ending: Ending) -> None:
        with self._lock:
            if self.ending == "writing":
                self.ending, self.ended_at = ending, time.monotonic()
        self._wake()

    def after(self, offset: int) -> Piece:
        """Everything written from `offset` on (empty past the end)."""
        with self._lock:
            offset = max(0, min(offset, self.length))
            first = max(0, bisect.bisect_right(self._starts, offset) - 1)
            joined = "".join(self._parts[first:])
            start = self._starts[first] if self._starts else 0
            return Piece(offset, joined[offset - start :])

    async def follow(self, after: int = 0, keepalive_s: float | None = None) -> AsyncIterator[Piece]:
        """The text from `after` on, a piece per wake-up, until the generation ends; an empty piece after each
        `keepalive_s` of silence (a long prefill), so a reader over a network can tell silence from a lost peer."""
        loop = asyncio.get_running_loop()
        while True:
            woken = asyncio.Event()
            with self._lock:
                self._waiters.append((loop, woken))
                ended = self.ending != "writing"
            piece = self.after(after)
            if piece.text:
                after += len(piece.text)
                yield piece
            if ended:
                return
            if self.length == after:
                try:
                    await asyncio.wait_for(woken.wait(), keepalive_s)
                except TimeoutError:
                    yield Piece(after, "")
            with self._lock:
                if (loop, woken) in self._waiters:
                    self._waiters.remove((loop, woken))

    def _wake(self) -> None:
        with self._lock:
            waiters, self._waiters = self._waiters, []
        for loop, event in waiters:
            if not loop.is_closed():
                loop.call_soon_threadsafe(event.set)


class WritingBoard:
    """The generations of this process, by (task, step): the newest attempt of each."""

    def __init__(self) -> None:
        self._generations: dict[tuple[str, int], Generation] = {}
        self._lock = threading.Lock()
        self._waiters: dict[tuple[str, int], list[tuple[asyncio.AbstractEventLoop, asyncio.Event]]] = {}

    def start(self, task_id: str, step: int, attempt: int, continued: str) -> Generation:
        """A new attempt of the step, continuing `continued` (empty: from the start); replaces an earlier one."""
        generation = Generation(task_id, step, attempt, continued)
        with self._lock:
            self._forget_old()
            earlier = self._generations.get((task_id, step))
            self._generations[(task_id, step)] = generation
            waiters = self._waiters.pop((task_id, step), [])
        if earlier is not None:
            earlier.end("cut")
        for loop, event in waiters:
            if not loop.is_closed():
                loop.call_soon_threadsafe(event.set)
        return generation

    def get(self, task_id: str, step: int) -> Generation | None:
        with self._lock:
            self._forget_old()
            return self._generations.get((task_id, step))

    async def wait_for(self, task_id: str, step: int, newer_than: int, timeout_s: float) -> Generation | None:
        """The step's generation once one of an attempt after `newer_than` runs here, waiting up to `timeout_s`
        for it to start: a reader that comes before the engine's first token gets that token as it is written,
        not a poll later. None if none started in time."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            started = asyncio.Event()
            with self._lock:
                self._forget_old()
                generation = self._generations.get((task_id, step))
                if generation is not None and generation.attempt > newer_than:
                    return generation
                self._waiters.setdefault((task_id, step), []).append((loop, started))
            try:
                await asyncio.wait_for(started.wait(), max(0.0, deadline - loop.time()))
            except TimeoutError:
                with self._lock:
                    waiting = self._waiters.get((task_id, step), [])
                    if (loop, started) in waiting:
                        waiting.remove((loop, started))
                    if not waiting:
                        self._waiters.pop((task_id, step), None)
                return None

    def _forget_old(self) -> None:
        now = time.monotonic()
        for key, generation in list(self._generations.items()):
            if generation.ended_at is not None and now - generation.ended_at > FINISHED_KEEP_S:
                del self._generations[key]


# The process's own board: the activity writes here and the node's server (or an in-process API) reads here.
BOARD = WritingBoard()
