"""`http(s)://` origins, and the HTTP transfer other sources (a hub, a bucket, a peer) are built on.

Resume is a Range request against the partial file: `Range: bytes=<have>-` answered 206 from
there, or 200 with the whole file by a server that ignores ranges (the fill then starts over).
Gzip would make ranges count compressed bytes, so only the identity encoding is accepted.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager

import httpx

from ..files import Revision, RevisionFile
from ._protocol import SourceTier, Transfer, TransferCut, WeightsFetchError, origin_url

# Connecting takes milliseconds when the origin is up. A read that waits 10 s ends as a cut and resumes with
# Range on a fresh connection (it costs a request, no bytes): so the fill judges the transfer floor
# (`weights.floor`, 30 s by default) at least every 10 s even when no byte comes, and a source that trickles is
# abandoned within its window plus one read.
READ_S = 10.0
TIMEOUT = httpx.Timeout(connect=10.0, read=READ_S, write=60.0, pool=10.0)
_CONTENT_RANGE = re.compile(r"bytes (\d+)-\d+/(\d+|\*)")
_UNSATISFIED_RANGE = re.compile(r"bytes \*/(\d+)")


class HttpFetcher:
    """Files under an `http(s)://` origin: `<origin>/<path>`. One connection pool per fetcher, shared by
    the fill's threads (httpx's sync client is thread-safe)."""

    tier: SourceTier = "origin"

    def __init__(self, headers: Mapping[str, str] | None = None, client: httpx.Client | None = None) -> None:
        self._headers = dict(headers or {})
        self._client = client
        self._lock = threading.Lock()

    def url_of(self, revision: Revision, file: RevisionFile) -> str:
        return origin_url(revision, file)

    def client(self) -> httpx.Client:
        with self._lock:
            if self._client is None:
                self._client = httpx.Client(timeout=TIMEOUT, follow_redirects=True)
            return self._client

    def headers(self, revision: Revision, file: RevisionFile) -> dict[str, str]:
        return dict(self._headers)

    @contextmanager
    def open(self, revision: Revision, file: RevisionFile, offset: int) -> Iterator[Transfer]:
        url = self.request_url(revision, file)
        with http_transfer(
            self.client(),
            url,
            offset,
            self.headers(revision, file),
            named=self.url_of(revision, file),
            refused=self.refusal,
        ) as transfer:
            yield transfer

    def request_url(self, revision: Revision, file: RevisionFile) -> str:
        return self.url_of(revision, file)

    def refusal(self, response: httpx.Response) -> str:
        """What to add to a 4xx's message (a hub's error code, a hint about credentials)."""
        return ""


@contextmanager
def http_transfer(
    client: httpx.Client,
    url: str,
    offset: int,
    headers: Mapping[str, str] | None = None,
    named: str | None = None,
    refused: Callable[[httpx.Response], str] | None = None,
) -> Iterator[Transfer]:
    """GET `url` from byte `offset`, as a `Transfer`. A 4xx is a `WeightsFetchError` naming `named` (the URL
    the catalogue gave, which may differ from the one requested) and the status; a 5xx, 429, a refused
    connection or a cut stream is a `TransferCut`."""
    named = named or url
    request_headers = {"Accept-Encoding": "identity", **(headers or {})}
    if offset > 0:
        request_headers["Range"] = f"bytes={offset}-"
    try:
        with client.stream("GET", url, headers=request_headers) as response:
            status = f"HTTP {response.status_code} {response.reason_phrase}".rstrip()
            if response.status_code == 416 and offset > 0:  # asked from the end: nothing more to send
                match = _UNSATISFIED_RANGE.fullmatch(response.headers.get("content-range", ""))
                yield Transfer(offset, int(match.group(1)) if match else None, iter(()))
                return
            if response.status_code >= 500 or response.status_code == 429:
                raise TransferCut(f"{named}: {status}")
            if response.status_code >= 400 or response.status_code not in (200, 206):
                extra = refused(response) if refused is not None else ""
                raise WeightsFetchError(f"{named}: {status}" + (f" ({extra})" if extra else ""))
            if response.headers.get("content-encoding", "identity") not in ("identity", ""):
                raise WeightsFetchError(
                    f"{named}: the server sent it {response.headers['content-encoding']}-encoded,"
                    f" which a resumed transfer cannot count; serve it as is"
                )
            start, total = 0, _int(response.headers.get("content-length"))
            if response.status_code == 206:
                match = _CONTENT_RANGE.fullmatch(response.headers.get("content-range", ""))
                if match is None:
                    raise WeightsFetchError(f"{named}: HTTP 206 without a byte Content-Range")
                start, total = int(match.group(1)), _int(match.group(2))
            yield Transfer(start, total, _chunks(response, named))
    except httpx.TransportError as exc:  # refused, reset, timed out: maybe later, from where it stopped
        raise TransferCut(f"cannot reach {named}: {type(exc).__name__}: {exc}") from exc


def _chunks(response: httpx.Response, named: str) -> Iterator[bytes]:
    try:
        # As the bytes arrive, not in 1 MiB pieces: what a cut connection delivered is kept and resumed from.
        yield from response.iter_raw()
    except httpx.TransportError as exc:
        raise TransferCut(f"{named}: cut after part of the file: {type(exc).__name__}: {exc}") from exc


def _int(value: str | None) -> int | None:
    return int(value) if value is not None and value.isdigit() else None
