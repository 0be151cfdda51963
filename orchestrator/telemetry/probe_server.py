"""The one HTTP port of a process that has no HTTP server of its own (a node agent, the orchestrator worker):
`/metrics`, `/healthz` and `/readyz`.

A check is a function that answers None when all is well and otherwise the reason it is not, so the probe's
503 body says why (a kubelet's event, `docker inspect`, or a person with curl reads it). `/healthz` is for
liveness: answer 503 only when a restart is the cure. `/readyz` is for readiness and is 404 where the process
has no such notion (the worker: it takes work from Temporal, no one routes requests to it).

prometheus_client's own WSGI app serves `/metrics` (content negotiation, gzip); the server is the stdlib's,
threaded, so a probe answers even while the process's event loop is busy, which is also why a check must be
cheap and must not touch the event loop: it reads state the process keeps up to date.
"""

from __future__ import annotations

import json
import socketserver
import threading
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import REGISTRY, make_wsgi_app

# None: healthy (or ready); a string: why not.
Check = Callable[[], str | None]


def _json() -> list[tuple[str, str]]:
    return [("Content-Type", "application/json")]  # a new list each time: wsgiref adds Content-Length to it


class _ThreadingWSGIServer(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a probe in flight never holds the process open at exit


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's signature
        pass  # a probe every few seconds would drown the process's own log


def _probe(check: Check | None, ok: str, not_ok: str) -> tuple[str, list[tuple[str, str]], bytes]:
    try:
        reason = check() if check is not None else None
    except Exception as exc:  # a check that breaks reports itself instead of killing the probe thread
        reason = f"the check failed: {type(exc).__name__}: {exc}"
    if reason is None:
        return "200 OK", _json(), json.dumps({"status": ok}).encode()
    return "503 Service Unavailable", _json(), json.dumps({"status": not_ok, "reason": reason}).encode()


def probe_app(live: Check | None = None, ready: Check | None = None) -> Callable[..., Iterable[bytes]]:
    """The WSGI app: /healthz from `live` (none: 200 while the process answers), /readyz from `ready` (none:
    404), everything else to prometheus_client's exposition of the process's registry."""
    metrics = make_wsgi_app(REGISTRY)

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == "/healthz":
            status, headers, body = _probe(live, "ok", "unhealthy")
        elif path == "/readyz" and ready is not None:
            status, headers, body = _probe(ready, "ready", "not ready")
        elif path == "/readyz":
            status, headers, body = "404 Not Found", _json(), b'{"status": "no readiness check here"}'
        else:
            return metrics(environ, start_response)
        start_response(status, headers)
        return [body]

    return app


class ProbeServer:
    """`probe_app` on `host`:`port`, from a daemon thread; `port` 0 binds a free one (read it back from `.port`).

    `host` has no default: the process's own `--host` (BERTH_HOST) decides, as it does for the API, so a process
    told to stay on loopback never shows its metrics to the network."""

    def __init__(self, port: int, live: Check | None = None, ready: Check | None = None, *, host: str) -> None:
        self._server = make_server(
            host, port, probe_app(live, ready), server_class=_ThreadingWSGIServer, handler_class=_QuietHandler
        )
        self.port: int = self._server.server_port
        self._thread = threading.Thread(target=self._server.serve_forever, name=f"probes:{self.port}", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
