"""Filling the weights cache: every missing file of a revision fetched, resumed when cut, hashed and verified.

The same for every source (`fetchers.WeightsFetcher`): a transfer writes `partial/<sha256>`, hashing as the
bytes arrive; a cut transfer resumes from what the partial holds (the source is asked from that offset);
a complete file whose size or sha256 is not the catalogue's is refused and fetched once more from scratch,
and a second refusal is an error naming the file, the source, what was expected and what came. A source
that says outright it has a file of another size is refused at once, since asking again changes nothing.

Runs in threads, off the node agent's event loop: hashing a 140 GB model takes minutes of CPU.
`fill_revision` is synchronous; `ReplicaManager` runs it with `asyncio.to_thread` and heartbeats meanwhile.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ..weights.fetchers import LocalSource, SourceTier, TransferCut, WeightsFetcher, WeightsFetchError, origin_fetcher
from ..weights.files import CHUNK_BYTES, Revision, RevisionFile, WeightsIntegrityError, sha256_of
from ..weights.floor import RateWatch, TransferFloor
from .weights_cache import WeightsCache

log = logging.getLogger("berth.node.weights")

# A transfer cut again and again without a byte of progress is a source that is down, not a flaky link:
# 5 tries with a backoff of 0.5, 1, 2, 4 s ≈ 7.5 s before the load fails and is placed elsewhere.
RESUMES_WITHOUT_PROGRESS = 5
BACKOFF_S = 0.5
# Files fetched at once: a hub or bucket serves each stream at a few hundred MB/s, and a sharded
# model has one file per few GB, so 4 streams fill a 10 Gbit/s link without flooding the source.
PARALLEL_FILES = 4


class FetchCancelled(Exception):
    """The load was cancelled while its files were arriving; what arrived stays as a partial."""


@dataclass(frozen=True)
class FillReport:
    """What a fill moved and how long it took, measured: the figure a learned bandwidth is made of."""

    digest: str
    tier: SourceTier
    files: int  # files fetched (those already here are not counted)
    bytes_fetched: int  # bytes that crossed from the source (a resumed prefix is not counted twice)
    seconds: float
    path: Path  # the revision's directory in the cache

    @property
    def bytes_per_s(self) -> float:
        return self.bytes_fetched / self.seconds if self.seconds > 0 else 0.0


def fill_revision(
    cache: WeightsCache,
    revision: Revision,
    fetcher: WeightsFetcher,
    *,
    stop: threading.Event | None = None,
    on_bytes: Callable[[int], None] | None = None,
    parallel: int = PARALLEL_FILES,
    backoff_s: float = BACKOFF_S,
    floor: TransferFloor | None = None,
) -> FillReport:
    """Fetch `revision`'s missing files from `fetcher` into `cache` and commit the entry.

    The room must be reserved (`cache.ensure_revision`); on failure the caller releases it.
    `on_bytes` is called with each chunk's length, from the fetch threads. A fill whose files together arrive
    slower than `floor` over its window raises `TransferStalled` (every file stops), so the caller can go to
    another source. Together: parallel streams share one link, and a slow honest link split four ways must not
    read as four stalls.
    """
    stop = stop or threading.Event()
    moved = _Counter(on_bytes)
    missing = cache.missing_files(revision)
    began = time.monotonic()
    watch = RateWatch(floor or TransferFloor(), time.monotonic())
    one = _FileFill(cache, revision, fetcher, stop, moved, backoff_s, watch)
    if len(missing) <= 1 or parallel <= 1:
        for f in missing:
            one.fetch(f)
    else:
        with ThreadPoolExecutor(max_workers=min(parallel, len(missing)), thread_name_prefix="weights") as pool:
            futures = [pool.submit(one.fetch, f) for f in missing]
            try:
                for future in futures:
                    future.result()
            except BaseException:
                stop.set()  # the other files stop at their next chunk
                raise
    path = cache.commit_revision(revision)
    seconds = time.monotonic() - began
    report = FillReport(revision.digest, fetcher.tier, len(missing), moved.total, seconds, path)
    log.info(
        "fetched %s (%d file(s), %d bytes) from %s in %.2fs, %.1f MB/s",
        revision.model,
        report.files,
        report.bytes_fetched,
        fetcher.tier,
        seconds,
        report.bytes_per_s / 1e6,
    )
    return report


class _Counter:
    def __init__(self, on_bytes: Callable[[int], None] | None) -> None:
        self.total = 0
        self._lock = threading.Lock()
        self._on_bytes = on_bytes

    def add(self, n: int) -> None:
        with self._lock:
            self.total += n
        if self._on_bytes is not None:
            self._on_bytes(n)


@dataclass
class _FileFill:
    cache: WeightsCache
    revision: Revision
    fetcher: WeightsFetcher
    stop: threading.Event
    moved: _Counter
    backoff_s: float
    watch: RateWatch  # the fill's, shared by its files' threads

    def fetch(self, file: RevisionFile) -> None:
        """One file into the cache's blobs: transferred, verified, and transferred again once if refused."""
        try:
            self._fetch(file)
        except WeightsIntegrityError as exc:
            exc.sha256 = file.sha256
            raise

    def _fetch(self, file: RevisionFile) -> None:
        source = self.fetcher.url_of(self.revision, file)
        for attempt in (1, 2):
            partial = self.cache.partial_path(file)
            got = self._linked(file, partial)
            if got is None:
                got = self._transfer(file, partial, source)
            try:
                self.cache.admit_file(file, partial, got, source)
                return
            except WeightsIntegrityError as exc:  # admit_file deleted what came
                if attempt == 2:
                    raise WeightsIntegrityError(f"refused twice: {exc}") from None
                log.warning("%s; fetching it again", exc)

    def _linked(self, file: RevisionFile, partial: Path) -> str | None:
        """A source on this machine's disk: hard-link and hash instead of copying; None to copy."""
        if not isinstance(self.fetcher, LocalSource):
            return None
        local = self.fetcher.local_path(self.revision, file)
        if local is None or not local.is_file():
            return None
        partial.unlink(missing_ok=True)
        try:
            os.link(local, partial)
        except OSError:  # another filesystem: copy through open()
            return None
        self.moved.add(file.size_bytes)  # in the cache now, though no byte was copied
        return sha256_of(partial)

    def _transfer(self, file: RevisionFile, partial: Path, source: str) -> str:
        """Fill `partial` to `file`'s size, resuming when cut; the sha256 of what it holds."""
        have = partial.stat().st_size if partial.exists() else 0
        if have > file.size_bytes:
            partial.unlink()
            have = 0
        digest = _hashed(partial) if have else hashlib.sha256()  # a resumed transfer hashes its prefix first
        fruitless = 0
        watch = self.watch
        if have:  # hashing the prefix was local work, not the source's slowness: the window starts again
            watch.restart(time.monotonic())
        # A silent read ends within `fetchers.http.READ_S` as a cut, so the floor is judged then too.
        while have < file.size_bytes:
            if self.stop.is_set():
                raise FetchCancelled(f"fetch of {file.path} stopped at {have} of {file.size_bytes} bytes")
            before = have
            try:
                with self.fetcher.open(self.revision, file, have) as transfer:
                    if transfer.total is not None and transfer.total != file.size_bytes:
                        partial.unlink(missing_ok=True)
                        raise WeightsIntegrityError(
                            f"{file.path} from {source}: the source has {transfer.total} "
                            f"bytes, the catalogue says {file.size_bytes}"
                        )
                    if transfer.start != have:  # the source sends the whole file: start over
                        have, digest = 0, hashlib.sha256()
                        partial.unlink(missing_ok=True)
                    with open(partial, "ab") as out:
                        for chunk in transfer.chunks:
                            if self.stop.is_set():
                                raise FetchCancelled(f"fetch of {file.path} stopped at {have} bytes")
                            if have + len(chunk) > file.size_bytes:
                                partial.unlink(missing_ok=True)
                                raise WeightsIntegrityError(
                                    f"{file.path} from {source}: more than the "
                                    f"{file.size_bytes} bytes the catalogue says"
                                )
                            out.write(chunk)
                            digest.update(chunk)
                            have += len(chunk)
                            self.moved.add(len(chunk))
                            watch.add(len(chunk), time.monotonic())
                            watch.check(time.monotonic(), source)
                if have < file.size_bytes and have == before:
                    partial.unlink(missing_ok=True)
                    raise WeightsIntegrityError(
                        f"{file.path} from {source}: the source ends at {have} bytes, "
                        f"the catalogue says {file.size_bytes}"
                    )
            except TransferCut as exc:
                watch.check(time.monotonic(), source)
                fruitless = 0 if have > before else fruitless + 1
                if fruitless >= RESUMES_WITHOUT_PROGRESS:
                    raise WeightsFetchError(f"{exc} (tried {fruitless} times without progress)") from None
                log.info("%s; resuming from byte %d", exc, have)
                self.stop.wait(self.backoff_s * 2 ** max(fruitless - 1, 0))
        return digest.hexdigest()


def _hashed(path: Path) -> hashlib._Hash:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK_BYTES):
            digest.update(chunk)
    return digest


class RevisionSource(Protocol):
    """One tier a `ReplicaManager` fills revisions from: the origin (`fill_from_origin`), datacenter peers.

    Reserved room is the caller's: the source fills and commits (`fill_revision`) or raises, and the
    caller releases or falls back to the next tier with the room still reserved.
    """

    async def __call__(
        self,
        cache: WeightsCache,
        revision: Revision,
        *,
        stop: threading.Event,
        on_bytes: Callable[[int], None] | None = None,
    ) -> FillReport: ...


async def fill_from_origin(
    cache: WeightsCache,
    revision: Revision,
    *,
    stop: threading.Event,
    on_bytes: Callable[[int], None] | None = None,
    floor: TransferFloor | None = None,
) -> FillReport:
    """Fill `revision` from the origin its catalogue entry names, in a thread."""
    return await asyncio.to_thread(
        fill_revision, cache, revision, origin_fetcher(revision), stop=stop, on_bytes=on_bytes, floor=floor
    )
