"""Real files for the weights cache's tests: small generated revisions, and a loopback origin that can cut."""

from __future__ import annotations

import hashlib
import http.server
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.weights.files import Revision, RevisionFile


def make_revision(root: Path, files: dict[str, bytes], model: str = "tiny", origin: str | None = None) -> Revision:
    """Write `files` under `root` and return the revision naming them (origin file://root by default)."""
    listed = []
    for path, data in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(data)
        listed.append(RevisionFile(path, hashlib.sha256(data).hexdigest(), len(data)))
    return Revision(model, origin or root.as_uri(), "main", tuple(listed))


@dataclass
class Origin:
    """What the loopback origin was asked and how it should misbehave."""

    root: Path
    ranges: list[str | None] = field(default_factory=list)  # the Range header of each GET, None when absent
    paths: list[str] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    cut_after: dict[str, int] = field(default_factory=dict)  # path -> bytes to send before cutting, once
    corrupt: dict[str, int] = field(default_factory=dict)  # path -> times left to flip a byte
    ignore_ranges: bool = False
    status: dict[str, int] = field(default_factory=dict)  # path -> status to answer
    trickle: dict[str, tuple[int, float]] = field(default_factory=dict)  # path -> (bytes, seconds): a piece each time
    url: str = ""


@contextmanager
def loopback_origin(root: Path, prefix: str = "") -> Iterator[Origin]:
    """An HTTP server for the files under `root` on 127.0.0.1 with Range support, that can cut a transfer
    mid-file (closing the connection after some bytes), trickle one, corrupt one, ignore ranges or answer a status."""
    origin = Origin(root)

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802
            path = self.path.split("?")[0].lstrip("/")
            if prefix and path.startswith(prefix):
                path = path[len(prefix) :].lstrip("/")
            origin.paths.append(path)
            origin.ranges.append(self.headers.get("Range"))
            origin.headers.append({k.lower(): v for k, v in self.headers.items()})
            if path in origin.status:
                self.send_response(origin.status[path])
                self.send_header("Content-Length", "0")
                self.send_header("X-Error-Code", "RepoNotFound" if origin.status[path] == 404 else "GatedRepo")
                self.end_headers()
                return
            file = root / path
            if not file.is_file():
                self.send_error(404)
                return
            data = file.read_bytes()
            if origin.corrupt.get(path, 0) > 0:
                origin.corrupt[path] -= 1
                data = bytes([data[0] ^ 0xFF]) + data[1:]
            start = 0
            rng = self.headers.get("Range")
            if rng and not origin.ignore_ranges:
                start = int(rng.removeprefix("bytes=").split("-")[0])
                if start >= len(data):
                    self.send_response(416)
                    self.send_header("Content-Range", f"bytes */{len(data)}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
            else:
                self.send_response(200)
            body = data[start:]
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if path in origin.trickle:
                piece, every_s = origin.trickle[path]
                try:
                    for at in range(0, len(body), piece):
                        self.wfile.write(body[at : at + piece])
                        self.wfile.flush()
                        time.sleep(every_s)
                except OSError:
                    pass  # the client gave up
                return
            cut = origin.cut_after.pop(path, None)
            if cut is not None:
                self.wfile.write(body[:cut])
                self.wfile.flush()
                self.close_connection = True
                self.connection.shutdown(2)  # mid-file: the client sees fewer bytes than Content-Length
                return
            self.wfile.write(body)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    origin.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield origin
    finally:
        server.shutdown()
        server.server_close()


def blob_bytes(cache_root: Path) -> int:
    """Bytes the cache's real files take, each blob once (what a `du` of blobs/ counts)."""
    return sum(p.stat().st_size for p in (cache_root / "blobs").iterdir()) if (cache_root / "blobs").exists() else 0
