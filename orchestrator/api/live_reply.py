"""A streamed own-loop call: the reply's text as the engine writes it, while the call's update is answered.

A client that asks for a stream (Chat Completions' `stream`, the Responses API's, the Agents SDK's
`run_streamed`, LangChain's `stream`) reads the step's text as it is written (`step_deltas.step_text`), not one
delta at the end. A refusal (short of budget, a conversation that moved, a bad setting) still answers with its
HTTP status: nothing is sent until the step writes its first piece or the call is answered. Once the call is
answered, what the deltas did not carry of the reply's text is sent, so the client's text is the reply's. A
step whose text departed from what was sent (an attempt that could not continue a cut text and started over)
cannot be taken back on these wires: the stream then ends with an error, and the same call sent again is
answered with the reply, free.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Coroutine
from typing import Any

from sdk.wire.own_loop import LoopReply

from .errors import ApiError
from .services import Services
from .step_deltas import Delta, step_text


class TextDeparted(Exception):
    """The step's text departed from what the stream had sent (a restarted attempt)."""


class LiveReply:
    """One call's reply, followed as it is written. `start()` before the response's headers, then `deltas()`."""

    def __init__(
        self, svc: Services, task_id: str, model: str, step: int, answering: Coroutine[Any, Any, tuple[str, LoopReply]]
    ) -> None:
        """`step`: the step the call will run as (the task's steps so far, plus one); `model`: the task's."""
        self.task_id, self.model, self.step = task_id, model, step
        self._pieces: asyncio.Queue[str | None] = asyncio.Queue()  # None: the step's text departed
        self._arrived = asyncio.Event()
        self._answer = asyncio.ensure_future(answering)
        self._follow = asyncio.ensure_future(self._read(svc, task_id, step))
        self.sent = ""
        self.reply: LoopReply | None = None

    async def start(self) -> None:
        """Wait for the first piece of text or the answer, whichever comes first; a refusal raises here."""
        first_piece = asyncio.ensure_future(self._arrived.wait())
        try:
            await asyncio.wait({first_piece, self._answer}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            first_piece.cancel()
        if self._answer.done():
            await self._close_follow()
            self.model, self.reply = self._answer.result()  # raises the call's refusal

    async def deltas(self) -> AsyncIterator[str]:
        """The text as written, then the rest of the reply's; TextDeparted when the step's text left what was
        sent. `self.reply` is set when it ends."""
        try:
            while not self._answer.done() or not self._pieces.empty():
                piece_waiting = asyncio.ensure_future(self._pieces.get())
                done, _ = await asyncio.wait({piece_waiting, self._answer}, return_when=asyncio.FIRST_COMPLETED)
                if piece_waiting in done:
                    piece = piece_waiting.result()
                    if piece is None:
                        raise TextDeparted
                    self.sent += piece
                    yield piece
                else:
                    piece_waiting.cancel()
                    await self._close_follow()
            self.model, self.reply = self._answer.result()
            text = self.reply.answer.content or ""
            if not text.startswith(self.sent):
                raise TextDeparted
            if rest := text[len(self.sent) :]:
                self.sent = text
                yield rest
        finally:
            await self._close_follow()

    async def close(self) -> None:
        """The client left: stop following (the call itself runs on; a re-sent call gets its reply)."""
        await self._close_follow()
        if not self._answer.done():
            self._answer.cancel()
            with contextlib.suppress(BaseException):
                await self._answer

    async def _read(self, svc: Services, task_id: str, step: int) -> None:
        queued = 0
        async for change in step_text(svc, task_id, step):
            if isinstance(change, Delta):
                queued += len(change.text)
                self._pieces.put_nowait(change.text)
            elif change.offset < queued:  # a reset that takes back text already queued (perhaps sent)
                self._pieces.put_nowait(None)
                self._arrived.set()
                return
            self._arrived.set()

    async def _close_follow(self) -> None:
        if not self._follow.done():
            self._follow.cancel()
        with contextlib.suppress(BaseException):
            await self._follow


def stream_error(exc: Exception) -> dict[str, Any]:
    """What a stream that cannot go on says in its last event, as OpenAI's streams carry an error."""
    if isinstance(exc, TextDeparted):
        return {
            "message": "the step's text started over after its generation was cut, so the text streamed so far is"
            " not the reply's: send the same call again to get the reply (free: it was booked once)",
            "type": "text_departed",
            "param": None,
            "code": "conflict",
        }
    if isinstance(exc, ApiError):
        return {"message": exc.message, "type": exc.code, "param": exc.field, "code": exc.code}
    raise TypeError(f"no stream error for {type(exc).__name__}")
