"""The protocol every weights source implements, and the two ways a transfer can fail."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol, runtime_checkable
from urllib.parse import quote

from ..files import Revision, RevisionFile, WeightsCacheError

SourceTier = Literal["datacenter", "origin"]


class WeightsFetchError(WeightsCacheError):
    """A source cannot give the file (not found, refused, unreachable); the message names its URL and,
    for HTTP, the status. Fetching again from the same source fails the same way."""


class TransferCut(Exception):
    """The bytes stopped coming (a reset connection, a 5xx, a read timeout); what arrived is kept and the
    transfer resumes from there."""


@dataclass
class Transfer:
    """A file's bytes on their way: `chunks` yields them from offset `start`."""

    start: int  # the offset asked for, or 0 when the source sends the whole file (it cannot resume)
    total: int | None  # the file's full size, when the source says (Content-Length, Content-Range, stat)
    chunks: Iterator[bytes]


@runtime_checkable
class WeightsFetcher(Protocol):
    """One kind of place weights come from. Called from a fetch thread, never the event loop."""

    tier: SourceTier  # what a load from it is reported as

    def url_of(self, revision: Revision, file: RevisionFile) -> str:
        """Where `file` comes from, as errors name it."""
        ...

    def open(self, revision: Revision, file: RevisionFile, offset: int) -> AbstractContextManager[Transfer]:
        """Start sending `file` from byte `offset` (0: all of it). Raises `WeightsFetchError` when the source
        refuses, `TransferCut` when it may answer later; the chunks raise `TransferCut` when cut."""
        ...


@runtime_checkable
class LocalSource(Protocol):
    """A fetcher whose files already lie on this machine: the fill hard-links them instead of copying."""

    def local_path(self, revision: Revision, file: RevisionFile) -> Path | None:
        """The file on this machine's disk, or None to be copied through `open`."""
        ...


def origin_url(revision: Revision, file: RevisionFile) -> str:
    """`file`'s URL under the revision's origin, each path part quoted."""
    return revision.origin.rstrip("/") + "/" + quote(file.path)
