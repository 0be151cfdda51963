"""Sessions of `berth_token` MCP servers: one server process per task, holding that task's token.

A task token may only act for its own task, and a stdio server reads its key once, from its
environment; so such a server cannot be shared between tasks the way other servers are.
Each task's first call starts one (its token fetched then); one a task no longer calls is
closed after a while, and all are closed with the tool worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from ._mcp_connection import McpConnection, connect
from ._mcp_server import IDLE_CLOSE_S, BerthAccess, McpServer


@dataclass
class _TaskSession:
    opening: asyncio.Task[McpConnection]
    busy: int = 0
    last_used: float = field(default_factory=time.monotonic)

    @property
    def open(self) -> bool:
        return self.opening.done() and not self.opening.cancelled() and self.opening.exception() is None


class TaskSessions:
    """The per-task sessions of one tool worker's `berth_token` servers."""

    def __init__(self, berth: BerthAccess, idle_close_s: float = IDLE_CLOSE_S) -> None:
        self._berth = berth
        self._idle_close_s = idle_close_s
        self._sessions: dict[tuple[str, str], _TaskSession] = {}
        self._reaper = asyncio.create_task(self._close_idle(), name="mcp idle task sessions")

    @contextlib.asynccontextmanager
    async def session(self, server: McpServer, task_id: str) -> AsyncIterator[McpConnection]:
        key = (server.name, task_id)
        session = self._sessions.get(key)
        if session is None:
            session = _TaskSession(asyncio.create_task(self._open(server, task_id)))
            self._sessions[key] = session
        session.busy += 1
        try:
            try:
                connection = await asyncio.shield(session.opening)  # parallel calls of a task share one start
            except Exception:
                if self._sessions.get(key) is session:
                    del self._sessions[key]  # the task's next call tries again
                raise
            yield connection
        finally:
            session.busy -= 1
            session.last_used = time.monotonic()

    async def aclose(self) -> None:
        self._reaper.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reaper
        sessions, self._sessions = list(self._sessions.values()), {}
        for session in sessions:
            session.opening.cancel()  # a no-op for those already open
        await asyncio.gather(*(s.opening for s in sessions), return_exceptions=True)
        await asyncio.gather(*(s.opening.result().close() for s in sessions if s.open))

    async def _open(self, server: McpServer, task_id: str) -> McpConnection:
        # The token lives only here and in the server's environment: never in a log, an event or history.
        token = await self._berth.task_token(task_id)
        return await connect(server, self._berth.env(token))

    async def _close_idle(self) -> None:
        while True:
            await asyncio.sleep(min(self._idle_close_s / 2, 30.0))
            now = time.monotonic()
            for key, session in list(self._sessions.items()):
                if session.busy == 0 and session.open and now - session.last_used > self._idle_close_s:
                    del self._sessions[key]
                    await session.opening.result().close()
