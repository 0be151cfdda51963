"""Model weights on a node's local disk: a size-limited cache with LRU eviction.

Why a node keeps weights at all: loading a model from local disk takes seconds, from the
datacenter tens of seconds and from origin minutes (the pool's locality tiers, docs/weights.md), and
scaling a model to zero unloads it from the GPU but keeps its weights here. The pool reads this
cache's `contents()` from heartbeats to score the "weights on local disk" tier.

Two kinds of entry share one capacity, one LRU order and one set of pins:
- a **revision** of a model with real weights (`Revision`: files with sha256 and size), keyed by
  its content digest and kept as real, verified files (`orchestrator/weights/files.py`'s `BlobStore`: blobs by
  sha256, and `revisions/<digest>/` laid out as the revision names its files, where engines start);
- a **simulated** model (catalogue `weights: null`), keyed by name: `record_loaded` writes a sparse
  file of the weights' size, so capacity, eviction and restart are real while the simulated engine
  needs no bytes (a laptop simulating H100s has no 140 GB to spare).

The index (`<root>/index.json`) records sizes, files and last use so the LRU order survives a
restart; a restart drops what is missing or truncated on disk and every transfer in progress.
Sizes are counted per entry: a blob two revisions share counts twice, so the disk holds at most
what the count says (never more than the capacity).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal
from urllib.parse import quote

from ..weights.files import BlobStore, Revision, RevisionFile, WeightsCacheError, WeightsIntegrityError

log = logging.getLogger(__name__)

Tier = Literal["disk", "datacenter", "origin"]
_TIERS: tuple[Tier, ...] = ("disk", "datacenter", "origin")
_INDEX_VERSION = 2  # 1 had simulated models only; it is still read

__all__ = [
    "CachedWeights",
    "LoadPlan",
    "Revision",
    "RevisionFile",
    "Tier",
    "WeightsCache",
    "WeightsCacheError",
    "WeightsIntegrityError",
]


@dataclass(frozen=True)
class LoadPlan:
    """Where `model`'s weights will come from and what it cost to make room for them."""

    model: str
    tier: Tier  # "disk" when already cached here; otherwise the source the caller named
    bytes_to_fetch: int  # 0 from disk
    evicted: list[str]  # models removed from this disk to make room, least recently used first
    digest: str | None = None  # the revision's content digest; None for a simulated model
    path: Path | None = None  # the revision's directory (complete once the fetch is committed)


@dataclass(frozen=True)
class CachedWeights:
    """One cached model, as a heartbeat reports it."""

    model: str
    size_bytes: int
    last_used: float  # Unix time
    pinned: bool  # in use by a loaded replica, so not evictable
    digest: str | None = None  # a real revision's content digest; None for a simulated model's sparse file
    path: Path | None = None  # a real revision's directory


# An entry's key: ("model", name) for a simulated model, ("revision", digest) for real weights.
_Key = tuple[Literal["model", "revision"], str]


@dataclass
class _Entry:
    size_bytes: int
    last_used: float
    seq: int  # LRU order; a counter, since two touches can share a clock reading
    models: list[str] = field(default_factory=list)  # a revision: the catalogue names it was loaded as
    files: list[list[str | int]] = field(default_factory=list)  # a revision: [path, sha256, size] each

    def revision_files(self) -> tuple[RevisionFile, ...]:
        return tuple(RevisionFile(str(p), str(s), int(n)) for p, s, n in self.files)


class WeightsCache:
    """Weights of models on local disk, at most `capacity_bytes` of them.

    Pins are not persisted: after a restart no replica is loaded, so nothing is in use.
    One lock guards everything; the node agent's load, heartbeat and scaling paths, and the
    fetch threads that admit files, may call from different threads.
    """

    def __init__(self, root: Path, capacity_bytes: int, clock: Callable[[], float] = time.time) -> None:
        if capacity_bytes <= 0:
            raise ValueError(f"capacity_bytes must be positive, got {capacity_bytes}")
        self._root = Path(root)
        self._dir = self._root / "weights"
        self._index_path = self._root / "index.json"
        self._capacity = capacity_bytes
        self._clock = clock
        self._lock = threading.RLock()
        self._pins: dict[_Key, int] = {}
        self._reserved: dict[_Key, int] = {}  # bytes promised by ensure() to loads in flight
        self._in_flight: dict[str, Revision] = {}  # revisions being fetched: their blobs are not garbage
        self._dir.mkdir(parents=True, exist_ok=True)
        self.store = BlobStore(self._root)
        self._entries = self._read_index()
        self._seq = max((e.seq for e in self._entries.values()), default=0)
        self._write_index()  # without what was dropped

    @property
    def capacity_bytes(self) -> int:
        return self._capacity

    def used_bytes(self) -> int:
        with self._lock:
            return sum(e.size_bytes for e in self._entries.values())

    def free_bytes(self) -> int:
        with self._lock:
            return self._capacity - self.used_bytes() - sum(self._reserved.values())

    # -- simulated models, by name (weights: null in the catalogue) --

    def has(self, model: str) -> bool:
        with self._lock:
            return ("model", model) in self._entries

    def path_of(self, model: str) -> Path:
        """The sparse file standing for simulated `model`'s weights (whether or not it exists yet)."""
        return self._dir / (quote(model, safe="") + ".weights")

    def ensure(self, model: str, size_bytes: int, source: Tier) -> LoadPlan:
        """Plan loading simulated `model`: from disk if cached, else from `source` after making room.

        Room for a fetch is reserved until `record_loaded` (or `release`), so two loads in flight
        cannot both count on the same free bytes.
        """
        self._check_source(source)
        key: _Key = ("model", model)
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry.size_bytes == size_bytes:
                self._touch(key)
                return LoadPlan(model, "disk", 0, [])
            if self._reserved.get(key) == size_bytes:
                return LoadPlan(model, source, size_bytes, [])  # a fetch in flight already holds room
            self._refuse_disk(model, source)
            self._check_fits(model, size_bytes)
            if entry is not None:  # new weights under the same name: the old file is stale
                self._replace(key)
            evicted = self._evict_for(size_bytes)
            self._reserved[key] = size_bytes
            return LoadPlan(model, source, size_bytes, evicted)

    def release(self, model: str) -> None:
        """Give back the room `ensure` reserved for a fetch that did not complete."""
        with self._lock:
            self._reserved.pop(("model", model), None)

    def record_loaded(self, model: str, size_bytes: int) -> None:
        """Record simulated `model`'s weights as present on disk (writing its sparse file) and just used."""
        key: _Key = ("model", model)
        with self._lock:
            self._check_fits(model, size_bytes)
            reserved = self._reserved.pop(key, 0)
            entry = self._entries.get(key)
            if entry is not None and entry.size_bytes == size_bytes:
                self._touch(key)
                return
            if entry is not None:
                self._replace(key)
            if reserved < size_bytes:
                self._evict_for(size_bytes - reserved)
            with open(self.path_of(model), "wb") as f:
                f.truncate(size_bytes)  # sparse: the apparent size without the blocks
            self._seq += 1
            self._entries[key] = _Entry(size_bytes, self._clock(), self._seq)
            self._write_index()

    def touch(self, model: str) -> bool:
        """Mark simulated `model` just used (a replica loaded it again); False if it is not cached."""
        return self._touch_if(("model", model))

    def pin(self, model: str) -> None:
        """A replica loaded simulated `model`: keep its weights until the matching `unpin`. Pins count."""
        self._pin(("model", model), model)

    def unpin(self, model: str) -> None:
        self._unpin(("model", model))

    # -- real revisions, by content digest --

    def has_revision(self, digest: str) -> bool:
        with self._lock:
            return ("revision", digest) in self._entries

    def revision_path(self, digest: str) -> Path:
        """The entry's directory, the files laid out as the revision names them (complete once committed)."""
        return self.store.revision_path(digest)

    def ensure_revision(self, revision: Revision, source: Tier) -> LoadPlan:
        """Plan loading `revision`: from disk if its verified entry is here, else from `source` after
        making room for all of it. The room is reserved until `commit_revision` or `release_revision`."""
        self._check_source(source)
        key: _Key = ("revision", revision.digest)
        size = revision.size_bytes
        with self._lock:
            path = self.revision_path(revision.digest)
            if key in self._entries:
                entry = self._entries[key]
                if revision.model not in entry.models:
                    entry.models.append(revision.model)
                self._touch(key)
                return LoadPlan(revision.model, "disk", 0, [], revision.digest, path)
            missing = sum(f.size_bytes for f in self.missing_files(revision))
            if key in self._reserved:  # a fetch in flight already holds room
                return LoadPlan(revision.model, source, missing, [], revision.digest, path)
            self._refuse_disk(revision.model, source)
            self._check_fits(revision.model, size)
            evicted = self._evict_for(size)
            self._reserved[key] = size
            self._in_flight[revision.digest] = revision
            # What eviction just removed may have been shared with this revision: count again.
            missing = sum(f.size_bytes for f in self.missing_files(revision))
            return LoadPlan(revision.model, source, missing, evicted, revision.digest, path)

    def missing_files(self, revision: Revision) -> list[RevisionFile]:
        """The revision's files without a verified blob here (the ones to fetch)."""
        return [f for f in revision.files if not self.store.has_blob(f)]

    def partial_path(self, file: RevisionFile) -> Path:
        """Where a transfer of `file` writes; a cut transfer's prefix stays there to be resumed."""
        return self.store.partial_path(file.sha256)

    def admit_file(self, file: RevisionFile, partial: Path, sha256_got: str, source: str) -> Path:
        """A transfer of `file` ended: keep it if its size and sha256 are the catalogue's, else delete it
        and raise `WeightsIntegrityError` (naming the file, `source`, expected and got)."""
        with self._lock:
            return self.store.admit(file, partial, sha256_got, source)

    def commit_revision(self, revision: Revision) -> Path:
        """Every file of `revision` is verified here: lay out its directory and record it, just used."""
        key: _Key = ("revision", revision.digest)
        with self._lock:
            missing = self.missing_files(revision)
            if missing:
                raise WeightsCacheError(f"cannot record {revision.model}: {missing[0].path} is not on this disk")
            reserved = self._reserved.pop(key, 0)
            self._in_flight.pop(revision.digest, None)
            path = self.store.link_revision(revision.digest, revision.files)
            if key in self._entries:
                self._touch(key)
                return path
            if reserved < revision.size_bytes:
                self._evict_for(revision.size_bytes - reserved)
            self._seq += 1
            self._entries[key] = _Entry(
                revision.size_bytes,
                self._clock(),
                self._seq,
                [revision.model],
                [[f.path, f.sha256, f.size_bytes] for f in revision.files],
            )
            self._write_index()
            return path

    def release_revision(self, digest: str) -> None:
        """Give back the room `ensure_revision` reserved for a fetch that did not complete; files it verified
        and no entry holds are deleted, as is its partial transfer."""
        with self._lock:
            self._reserved.pop(("revision", digest), None)
            revision = self._in_flight.pop(digest, None)
            if revision is not None and ("revision", digest) not in self._entries:
                for f in revision.files:
                    self.store.partial_path(f.sha256).unlink(missing_ok=True)
                self._collect_blobs()

    def pin_revision(self, digest: str) -> None:
        self._pin(("revision", digest), digest)

    def unpin_revision(self, digest: str) -> None:
        self._unpin(("revision", digest))

    def touch_revision(self, digest: str) -> bool:
        return self._touch_if(("revision", digest))

    # -- both kinds --

    def evict_for(self, size_bytes: int) -> list[str]:
        """Evict least recently used, unpinned weights until `size_bytes` fit; the evicted names.

        All or nothing: when pinned weights leave too little room, nothing is evicted.
        """
        with self._lock:
            return self._evict_for(size_bytes)

    def contents(self) -> list[CachedWeights]:
        """Cached models, most recently used first; a revision once per catalogue name it serves."""
        with self._lock:
            ordered = sorted(self._entries.items(), key=lambda kv: kv[1].seq, reverse=True)
            out: list[CachedWeights] = []
            for key, e in ordered:
                kind, name = key
                if kind == "model":
                    out.append(CachedWeights(name, e.size_bytes, e.last_used, key in self._pins))
                else:
                    out.extend(
                        CachedWeights(m, e.size_bytes, e.last_used, key in self._pins, name, self.revision_path(name))
                        for m in e.models
                    )
            return out

    # -- internals (called with the lock held) --

    @staticmethod
    def _check_source(source: str) -> None:
        if source not in _TIERS:
            raise ValueError(f"source must be one of {', '.join(_TIERS)}, got {source!r}")

    @staticmethod
    def _refuse_disk(model: str, source: Tier) -> None:
        if source == "disk":
            raise WeightsCacheError(f"model {model!r} is not in this node's disk cache; name where to fetch it from")

    def _check_fits(self, model: str, size_bytes: int) -> None:
        if size_bytes <= 0:
            raise ValueError(f"size_bytes of {model!r} must be positive, got {size_bytes}")
        if size_bytes > self._capacity:
            raise WeightsCacheError(
                f"model {model!r} needs {_gib(size_bytes)} but this node's weights cache holds "
                f"{_gib(self._capacity)} in all; it can never be cached here"
            )

    def _pin(self, key: _Key, name: str) -> None:
        with self._lock:
            if key not in self._entries:
                raise WeightsCacheError(f"cannot pin {name!r}: its weights are not in this node's disk cache")
            self._pins[key] = self._pins.get(key, 0) + 1

    def _unpin(self, key: _Key) -> None:
        with self._lock:
            count = self._pins.get(key, 0) - 1
            if count > 0:
                self._pins[key] = count
            else:
                self._pins.pop(key, None)

    def _touch_if(self, key: _Key) -> bool:
        with self._lock:
            if key not in self._entries:
                return False
            self._touch(key)
            return True

    def _touch(self, key: _Key) -> None:
        self._seq += 1
        entry = self._entries[key]
        entry.last_used, entry.seq = self._clock(), self._seq
        self._write_index()

    def _name(self, key: _Key) -> str:
        kind, name = key
        return name if kind == "model" else ", ".join(self._entries[key].models) or name[:12]

    def _evict_for(self, size_bytes: int) -> list[str]:
        need = size_bytes - self.free_bytes()
        if need <= 0:
            return []
        victims: list[_Key] = []
        for key, entry in sorted(self._entries.items(), key=lambda kv: kv[1].seq):
            if need <= 0:
                break
            if key not in self._pins:
                victims.append(key)
                need -= entry.size_bytes
        if need > 0:
            held = []
            if self._pins:
                pinned = sorted(self._pins)
                pinned_bytes = sum(self._entries[k].size_bytes for k in pinned)
                held.append(f"loaded replicas pin {_gib(pinned_bytes)} ({', '.join(self._name(k) for k in pinned)})")
            if self._reserved:
                held.append(f"{_gib(sum(self._reserved.values()))} is reserved for loads in flight")
            raise WeightsCacheError(
                f"cannot free {_gib(size_bytes)} in this node's weights cache: {' and '.join(held)}"
            )
        names = [self._name(k) for k in victims]
        for key in victims:
            self._drop(key)
        log.info("evicted %s to make room for %d bytes", names, size_bytes)
        return names

    def _replace(self, key: _Key) -> None:
        if key in self._pins:
            raise WeightsCacheError(
                f"cannot replace the weights of {key[1]!r} with a different size: a loaded replica uses them"
            )
        self._drop(key)

    def _drop(self, key: _Key) -> None:
        self._entries.pop(key, None)
        self._write_index()  # before the files go, so the index never names a missing file
        kind, name = key
        if kind == "model":
            self.path_of(name).unlink(missing_ok=True)
        else:
            self.store.remove_revision(name)
            self._collect_blobs()

    def _collect_blobs(self) -> None:
        """Delete blobs no entry and no fetch in flight holds."""
        keep = {f.sha256 for k, e in self._entries.items() if k[0] == "revision" for f in e.revision_files()}
        keep |= {f.sha256 for r in self._in_flight.values() for f in r.files}
        self.store.remove_blobs_except(keep)

    def _write_index(self) -> None:
        models = {n: asdict(e) for (k, n), e in self._entries.items() if k == "model"}
        for entry in models.values():
            del entry["models"], entry["files"]
        revisions = {d: asdict(e) for (k, d), e in self._entries.items() if k == "revision"}
        data = {"version": _INDEX_VERSION, "models": models, "revisions": revisions}
        tmp = self._index_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
        os.replace(tmp, self._index_path)  # atomic: a crash leaves the old index or the new one

    def _read_index(self) -> dict[_Key, _Entry]:
        """The index as it was, minus entries whose files are gone or have the wrong size. Files the index
        does not know (a crash between writing a file and the index) and every partial transfer are
        deleted, since nothing says they are complete. Blobs are checked by size, not re-hashed: they
        were hashed on arrival, and hashing 140 GB at every start would take minutes."""
        entries: dict[_Key, _Entry] = {}
        if self._index_path.exists():
            try:
                raw = json.loads(self._index_path.read_text())
                entries = {("model", m): _Entry(**e) for m, e in raw["models"].items()}
                entries.update({("revision", d): _Entry(**e) for d, e in raw.get("revisions", {}).items()})
            except (ValueError, KeyError, TypeError) as e:
                log.warning("weights cache index %s is unreadable (%s); starting empty", self._index_path, e)
                entries = {}
        for key, entry in list(entries.items()):
            kind, name = key
            if kind == "model":
                path = self.path_of(name)
                complete = path.is_file() and path.stat().st_size == entry.size_bytes
            else:
                files = entry.revision_files()
                complete = (
                    bool(files)
                    and entry.size_bytes == sum(f.size_bytes for f in files)
                    and all(self.store.has_blob(f) for f in files)
                )
            if not complete:
                log.warning(
                    "weights of %s are missing or truncated on disk; dropping them",
                    name if kind == "model" else f"{', '.join(entry.models)} ({name[:12]})",
                )
                del entries[key]
        known = {self.path_of(n).name for k, n in entries if k == "model"}
        for path in self._dir.iterdir():
            if path.name not in known and path.suffix == ".weights":
                path.unlink(missing_ok=True)
        revisions = {n: e for (k, n), e in entries.items() if k == "revision"}
        self.store.clear_partials()
        self.store.remove_blobs_except({f.sha256 for e in revisions.values() for f in e.revision_files()})
        self.store.remove_revisions_except(set(revisions))
        for digest, entry in revisions.items():
            self.store.link_revision(digest, entry.revision_files())  # a link someone deleted comes back
        return entries


def _gib(size_bytes: int) -> str:
    return f"{size_bytes / 2**30:.1f} GiB"
