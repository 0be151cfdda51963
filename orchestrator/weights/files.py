"""Real weights on a node's disk: model revisions, their content digest, and the files that hold them.

A revision is the list of its files, each with a path, a sha256 and a size (the catalogue's
`WeightsSource`). Its *digest* is a sha256 over that list, so two nodes, or two catalogue names,
that hold the same bytes hold the same entry, and a peer can be asked for an entry by digest.

On disk, under the cache root:

    blobs/<sha256>                       each verified file once, named by its content
    partial/<sha256>                     a transfer in progress (a cut one resumes from here)
    revisions/<digest>/<path as named>   the entry: hard links to the blobs, the layout engines expect

A file reaches `blobs/` only after its sha256 and size matched (`BlobStore.admit`), by an atomic
rename, so every blob is verified; a revision's directory is built beside and renamed into place,
so an engine never sees half an entry. No I/O here is remote: fetching is `weights_fill`'s.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from sdk.wire.catalogue import ModelEntry

# 1 MiB reads: large enough that hashing is bound by the CPU, not by system calls.
CHUNK_BYTES = 1 << 20


class WeightsCacheError(RuntimeError):
    """A request the cache cannot satisfy; the message says what and why."""


class WeightsIntegrityError(WeightsCacheError):
    """A file's bytes are not what the catalogue says: its size or its sha256 differ. `sha256` names the file
    (the catalogue's digest), once the fill knows which it was: a report of a corrupt copy names it."""

    sha256: str | None = None


@dataclass(frozen=True)
class RevisionFile:
    """One file of a revision, as the catalogue names it."""

    path: str  # relative, inside the revision ("model-00001-of-00004.safetensors", "tokenizer.json")
    sha256: str
    size_bytes: int


@dataclass(frozen=True)
class Revision:
    """One model revision's real weights: where they come from and exactly which bytes they are."""

    model: str  # the catalogue name that asked for it (an entry may serve several names)
    origin: str  # the catalogue's origin URL, the revision's root
    revision: str
    files: tuple[RevisionFile, ...]

    @classmethod
    def of(cls, entry: ModelEntry) -> Revision | None:
        """The revision a catalogue entry names; None for a simulated model (no real weights)."""
        if entry.weights is None:
            return None
        files = tuple(RevisionFile(f.path, f.sha256, f.size_bytes) for f in entry.weights.files)
        return cls(entry.name, entry.weights.origin, entry.weights.revision, files)

    @cached_property
    def digest(self) -> str:
        """sha256 over the sorted (path, sha256, size) lines: the entry's name, the same on every node."""
        lines = sorted(f"{f.path}\0{f.sha256}\0{f.size_bytes}\n" for f in self.files)
        return hashlib.sha256("".join(lines).encode()).hexdigest()

    @property
    def size_bytes(self) -> int:
        return sum(f.size_bytes for f in self.files)

    def main_file(self, suffix: str) -> RevisionFile | None:
        """The file an engine opens when it takes one file (llama.cpp's .gguf): the first by path, so
        a split GGUF's `-00001-of-000NN` part, which names the others."""
        matching = sorted((f for f in self.files if f.path.endswith(suffix)), key=lambda f: f.path)
        return matching[0] if matching else None


def sha256_of(path: Path, size_limit: int | None = None) -> str:
    """The sha256 of `path`'s first `size_limit` bytes (all of it by default)."""
    digest = hashlib.sha256()
    left = size_limit
    with open(path, "rb") as f:
        while left is None or left > 0:
            chunk = f.read(CHUNK_BYTES if left is None else min(CHUNK_BYTES, left))
            if not chunk:
                break
            digest.update(chunk)
            if left is not None:
                left -= len(chunk)
    return digest.hexdigest()


class BlobStore:
    """The files of the cache's real entries; `WeightsCache` decides which exist, this only moves them."""

    def __init__(self, root: Path) -> None:
        self.blobs = root / "blobs"
        self.partial = root / "partial"
        self.revisions = root / "revisions"
        for d in (self.blobs, self.partial, self.revisions):
            d.mkdir(parents=True, exist_ok=True)

    def blob_path(self, sha256: str) -> Path:
        return self.blobs / sha256

    def partial_path(self, sha256: str) -> Path:
        return self.partial / sha256

    def revision_path(self, digest: str) -> Path:
        return self.revisions / digest

    def has_blob(self, file: RevisionFile) -> bool:
        path = self.blob_path(file.sha256)
        return path.is_file() and path.stat().st_size == file.size_bytes

    def admit(self, file: RevisionFile, partial: Path, sha256_got: str, source: str) -> Path:
        """Move a transferred file into the blobs if its size and sha256 are the catalogue's; else delete
        it and raise `WeightsIntegrityError` naming the file, what was expected and what arrived."""
        size_got = partial.stat().st_size
        if size_got != file.size_bytes or sha256_got != file.sha256:
            partial.unlink(missing_ok=True)
            what = (
                f"{size_got} bytes, the catalogue says {file.size_bytes}"
                if size_got != file.size_bytes
                else f"sha256 {sha256_got}, the catalogue says {file.sha256}"
            )
            raise WeightsIntegrityError(f"{file.path} from {source}: {what}")
        path = self.blob_path(file.sha256)
        os.replace(partial, path)
        return path

    def link_revision(self, digest: str, files: tuple[RevisionFile, ...]) -> Path:
        """The entry's directory: each file under its revision path, a hard link to its blob (a symlink where
        the filesystem has no hard links). Built beside and renamed, so it appears whole or not at all."""
        final = self.revision_path(digest)
        if self._linked(final, files):
            return final
        building = self.revisions / f".{digest}.building"
        shutil.rmtree(building, ignore_errors=True)
        for f in files:
            target = building / f.path
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(self.blob_path(f.sha256), target)
            except OSError:
                os.symlink(self.blob_path(f.sha256), target)
        shutil.rmtree(final, ignore_errors=True)
        os.replace(building, final)
        return final

    def remove_revision(self, digest: str) -> None:
        shutil.rmtree(self.revision_path(digest), ignore_errors=True)

    def remove_blobs_except(self, keep: set[str]) -> list[str]:
        """Delete every blob whose sha256 is not in `keep`; the ones deleted."""
        gone = []
        for path in self.blobs.iterdir():
            if path.name not in keep:
                path.unlink(missing_ok=True)
                gone.append(path.name)
        return gone

    def clear_partials(self) -> None:
        """After a restart nothing holds room for a transfer, so its prefix is neither counted nor trusted."""
        for path in self.partial.iterdir():
            path.unlink(missing_ok=True)

    def remove_revisions_except(self, keep: set[str]) -> None:
        for path in self.revisions.iterdir():
            if path.name not in keep:
                shutil.rmtree(path, ignore_errors=True)

    def _linked(self, directory: Path, files: tuple[RevisionFile, ...]) -> bool:
        for f in files:
            path = directory / f.path
            if not path.is_file() or path.stat().st_size != f.size_bytes:
                return False
        return True
