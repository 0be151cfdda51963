"""The node's peer server: the files of its weights cache, to peers of its datacenter that hold a ticket
(and, beside them, its running steps' text to the control plane: writing_route.py).

`GET /v1/peer/files/<sha256>` with the ticket in `X-Berth-Peer-Ticket`, and optionally `Range: bytes=N-` (or
`N-M`) to resume a cut copy. Before a byte goes out, the control plane is asked (as this node) whether the
ticket lets this node serve that file (`PeerTickets.check`): tickets are bound to a source node, a holder and
the digests of one model's files, and die when they expire or when their copy is reported. So a ticket for
another node, another entry, an expired one or a replayed one is refused here, by the control plane's word.

What the server reads is the cache's own verified files, looked up by digest (`VerifiedFiles`): a file
the cache does not hold, or holds at another size, is answered 404, and the fetching node reports the claim
it could not be served (store/peers.py says what follows for this node).

`limit_bytes_per_s` caps what one server sends in all, so copies to peers leave the node's NIC room for its
own traffic (and let the benchmark set a datacenter link's rate on loopback).
"""

from __future__ import annotations

import asyncio
import logging
import re
import socket
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from sdk.wire.peers import PEER_FILES_PATH, PEER_TICKET_HEADER, TICKET_PATTERN

from ..engines.serving import listening_socket
from .peer_tickets import PeerTickets, TicketRefused

if TYPE_CHECKING:
    from .weights_cache import WeightsCache

log = logging.getLogger("berth.node.peers")

# 1 MiB reads: large enough that a 2.5 GiB/s link needs only ~2,500 sends a second, small enough that a cut
# copy loses little and a throttle paces smoothly.
CHUNK_BYTES = 2**20
_RANGE = re.compile(r"^bytes=(\d{1,15})-(\d{0,15})$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_TICKET = re.compile(TICKET_PATTERN)


class VerifiedFiles(Protocol):
    """What the peer server needs of the weights cache: the path of a file it holds, verified, by sha256."""

    def verified_path(self, sha256: str) -> Path | None: ...


class Throttle:
    """A shared pace for every response of one server: at most `bytes_per_s` in all (None: no limit)."""

    def __init__(self, bytes_per_s: float | None) -> None:
        self.bytes_per_s = bytes_per_s
        self._next = time.monotonic()
        self._lock = asyncio.Lock()

    async def take(self, n: int) -> None:
        if not self.bytes_per_s:
            return
        async with self._lock:
            now = time.monotonic()
            start = max(self._next, now)
            self._next = start + n / self.bytes_per_s
        if start > now:
            await asyncio.sleep(start - now)


def _refusal(status: int, field: str, message: str) -> JSONResponse:
    return JSONResponse({"error": {"field": field, "message": message}}, status_code=status)


def peer_app(files: VerifiedFiles, tickets: PeerTickets, throttle: Throttle, routes: Sequence[Route] = ()) -> Starlette:
    """The file route, and `routes` beside it (the writing route: writing_route.py)."""

    async def serve_file(request: Request) -> Response:
        sha256 = request.path_params["sha256"]
        if not _SHA256.match(sha256):
            return _refusal(422, "sha256", "must be 64 lower-case hex digits")
        ticket = request.headers.get(PEER_TICKET_HEADER, "")
        if not _TICKET.match(ticket):
            return _refusal(401, "ticket", f"a peer ticket is required in {PEER_TICKET_HEADER}")
        try:
            grant = await tickets.check(ticket, sha256)
        except TicketRefused as exc:
            status = exc.status if exc.status in (401, 403) else 503
            return _refusal(status, "ticket", f"the control plane refused this ticket here: {exc}")
        except Exception as exc:  # noqa: BLE001 — no word from the control plane means no bytes
            return _refusal(503, "ticket", f"the control plane could not check the ticket: {exc}")
        path = files.verified_path(sha256)
        size = grant.file.size_bytes
        if path is None or not path.is_file() or path.stat().st_size != size:
            log.warning("a peer asked for %s of %s, which this node's cache does not hold", sha256[:12], grant.model)
            return _refusal(404, "sha256", f"this node does not hold {grant.file.path} of {grant.model}")
        start, end = 0, size - 1
        header = request.headers.get("range")
        if header is not None:
            match = _RANGE.match(header.strip())
            if match is None:
                return _refusal(416, "range", "only one range, bytes=N- or bytes=N-M")
            start = int(match.group(1))
            end = min(int(match.group(2)), size - 1) if match.group(2) else size - 1
            if start > end or start >= size:
                return Response(status_code=416, headers={"content-range": f"bytes */{size}"})
        length = end - start + 1
        log.info("serving %s of %s to %s: bytes %d-%d", grant.file.path, grant.model, grant.dest_node, start, end)
        headers = {"content-length": str(length), "accept-ranges": "bytes", "content-type": "application/octet-stream"}
        if header is not None:
            headers["content-range"] = f"bytes {start}-{end}/{size}"
        return StreamingResponse(
            _read(path, start, length, throttle), status_code=206 if header else 200, headers=headers
        )

    return Starlette(routes=[Route(PEER_FILES_PATH + "/{sha256}", serve_file, methods=["GET"]), *routes])


async def _read(path: Path, start: int, length: int, throttle: Throttle):  # noqa: ANN202 — an async byte stream
    with open(path, "rb") as f:  # noqa: ASYNC230  (opening is instant; every read goes to a thread)
        f.seek(start)
        left = length
        while left > 0:
            chunk = await asyncio.to_thread(f.read, min(CHUNK_BYTES, left))
            if not chunk:
                return
            await throttle.take(len(chunk))
            left -= len(chunk)
            yield chunk


class PeerServer:
    """The peer server on `host`:`port` (0: a free port, named by `port` once started), in the caller's loop."""

    def __init__(
        self,
        files: VerifiedFiles,
        tickets: PeerTickets,
        host: str = "127.0.0.1",
        port: int = 0,
        limit_bytes_per_s: float | None = None,
        routes: Sequence[Route] = (),
    ) -> None:
        self.throttle = Throttle(limit_bytes_per_s)
        self.host = host
        self._sock: socket.socket = listening_socket(host, port)
        self.port: int = self._sock.getsockname()[1]
        self._server = uvicorn.Server(
            uvicorn.Config(
                peer_app(files, tickets, self.throttle, routes),
                log_level="warning",
                lifespan="off",
                timeout_graceful_shutdown=1,
            )
        )
        self._task: asyncio.Task | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self) -> None:
        self._task = asyncio.create_task(self._server.serve(sockets=[self._sock]))
        while not self._server.started:
            if self._task.done():
                self._task.result()
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
        self._server.should_exit = True
        if self._task is not None:
            await self._task
        self._sock.close()


class CacheBlobs:
    """`VerifiedFiles` over the weights cache: its blobs are named by sha256 and admitted only once verified."""

    def __init__(self, cache: WeightsCache) -> None:
        self._cache = cache

    def verified_path(self, sha256: str) -> Path | None:
        path = self._cache.store.blob_path(sha256)
        return path if path.is_file() else None
