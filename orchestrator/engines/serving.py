"""What every Berth-run HTTP server shares: a listener with Nagle off, an app served on a thread, a stream that
says how it ended.

The simulated engine, the llama.cpp engine and the node's peer server each bind their own socket (so a port
clash fails before anything loads) and hand it to uvicorn; tests and benchmarks run the engines in-process
on a free loopback port.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import AsyncGenerator, Callable
from typing import Any, Self

from starlette.responses import StreamingResponse


def listening_socket(host: str, port: int, listen: bool = True) -> socket.socket:
    """A bound listener whose accepted connections have Nagle's algorithm off (`listen=False`: bound only).

    uvicorn does not set TCP_NODELAY on connections from a socket it is handed; without it a
    kept-alive client waits out a 40 ms delayed ACK on every response. Linux copies the
    option from the listener to each accepted socket.
    """
    if listen:
        sock = socket.create_server((host, port))
    else:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as create_server does on POSIX
        sock.bind((host, port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


class AppThread:
    """An engine's app on a free port of `host` in a background thread; `base_url` ends in /v1.

    with EngineThread(...) as engine:
        httpx.post(f"{engine.base_url}/chat/completions", json=...)
    """

    def __init__(self, app: Any, what: str, host: str = "127.0.0.1") -> None:
        import uvicorn

        self.app = app
        self.what = what
        self._sock = listening_socket(host, 0)
        self.port: int = self._sock.getsockname()[1]
        self.base_url = f"http://{host}:{self.port}/v1"
        self._server = uvicorn.Server(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=1))
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True)

    def start(self, timeout_s: float = 60.0) -> Self:
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the {self.what} did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._sock.close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class ReportingStream(StreamingResponse):
    """An SSE stream that reports how it ended: Starlette ends a stream silently when the client leaves, and an
    engine must know (to stop generating, and to journal what it wrote as aborted)."""

    def __init__(self, content: AsyncGenerator[str, None], on_close: Callable[[], None]) -> None:
        super().__init__(content, media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
        self._on_close = on_close
        self._content = content

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._on_close()
            await self._content.aclose()
