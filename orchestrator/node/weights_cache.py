"""Model weights on a node's local disk: a size-limited cache with LRU eviction.

Why a node keeps weights at all: loading a model from local disk takes seconds, from the
datacenter tens of seconds and from origin minutes (DESIGN.md, the pool's locality tiers), and
scaling a model to zero unloads it from the GPU but keeps its weights here. The pool reads this
cache's `contents()` from heartbeats to score the "weights on local disk" tier.

Each cached model is a file under `<root>/weights/`; the index (`<root>/index.json`) records sizes
and last use so the LRU order survives a restart. `record_loaded` writes a sparse file of the
weights' size: the cache's bookkeeping (capacity, eviction, restart) is real while the simulated
engine needs no real bytes; a real downloader will write the file's content instead.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import quote

log = logging.getLogger(__name__)

Tier = Literal["disk", "datacenter", "origin"]
_TIERS: tuple[Tier, ...] = ("disk", "datacenter", "origin")
_INDEX_VERSION = 1


class WeightsCacheError(RuntimeError):
    """A request the cache cannot satisfy; the message says what and why."""


@dataclass(frozen=True)
class LoadPlan:
    """Where `model`'s weights will come from and what it cost to make room for them."""

    model: str
    tier: Tier  # "disk" when already cached here; otherwise the source the caller named
    bytes_to_fetch: int  # 0 from disk
    evicted: list[str]  # models removed from this disk to make room, least recently used first


@dataclass(frozen=True)
class CachedWeights:
    """One cached model, as a heartbeat reports it."""

    model: str
    size_bytes: int
    last_used: float  # Unix time
    pinned: bool  # in use by a loaded replica, so not evictable


@dataclass
class _Entry:
    size_bytes: int
    last_used: float
    seq: int  # LRU order; a counter, since two touches can share a clock reading


class WeightsCache:
    """Weights of models on local disk, at most `capacity_bytes` of them.

    Pins are not persisted: after a restart no replica is loaded, so nothing is in use.
    One lock guards everything; the node agent's load, heartbeat and scaling paths may call
    from different threads.
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
        self._pins: dict[str, int] = {}
        self._reserved: dict[str, int] = {}  # bytes promised by ensure() to loads in flight
        self._dir.mkdir(parents=True, exist_ok=True)
        self._entries = self._read_index()
        self._seq = max((e.seq for e in self._entries.values()), default=0)

    @property
    def capacity_bytes(self) -> int:
        return self._capacity

    def used_bytes(self) -> int:
        with self._lock:
            return sum(e.size_bytes for e in self._entries.values())

    def free_bytes(self) -> int:
        with self._lock:
            return self._capacity - self.used_bytes() - sum(self._reserved.values())

    def has(self, model: str) -> bool:
        with self._lock:
            return model in self._entries

    def path_of(self, model: str) -> Path:
        """The file holding `model`'s weights (whether or not it exists yet)."""
        return self._dir / (quote(model, safe="") + ".weights")

    def ensure(self, model: str, size_bytes: int, source: Tier) -> LoadPlan:
        """Plan loading `model`: from disk if cached, else from `source` after making room.

        Room for a fetch is reserved until `record_loaded` (or `release`), so two loads in flight
        cannot both count on the same free bytes.
        """
        if source not in _TIERS:
            raise ValueError(f"source must be one of {', '.join(_TIERS)}, got {source!r}")
        with self._lock:
            entry = self._entries.get(model)
            if entry is not None and entry.size_bytes == size_bytes:
                self._touch(model)
                return LoadPlan(model, "disk", 0, [])
            if self._reserved.get(model) == size_bytes:
                return LoadPlan(model, source, size_bytes, [])  # a fetch in flight already holds room
            if source == "disk":
                raise WeightsCacheError(
                    f"model {model!r} is not in this node's disk cache; name where to fetch it from"
                )
            self._check_fits(model, size_bytes)
            if entry is not None:  # new weights under the same name: the old file is stale
                self._replace(model)
            evicted = self._evict_for(size_bytes)
            self._reserved[model] = size_bytes
            return LoadPlan(model, source, size_bytes, evicted)

    def release(self, model: str) -> None:
        """Give back the room `ensure` reserved for a fetch that did not complete."""
        with self._lock:
            self._reserved.pop(model, None)

    def record_loaded(self, model: str, size_bytes: int) -> None:
        """Record `model`'s weights as present on disk (writing its sparse file) and just used."""
        with self._lock:
            self._check_fits(model, size_bytes)
            reserved = self._reserved.pop(model, 0)
            entry = self._entries.get(model)
            if entry is not None and entry.size_bytes == size_bytes:
                self._touch(model)
                return
            if entry is not None:
                self._replace(model)
            if reserved < size_bytes:
                self._evict_for(size_bytes - reserved)
            path = self.path_of(model)
            with open(path, "wb") as f:
                f.truncate(size_bytes)  # sparse: the apparent size without the blocks
            self._seq += 1
            self._entries[model] = _Entry(size_bytes, self._clock(), self._seq)
            self._write_index()

    def touch(self, model: str) -> bool:
        """Mark `model` just used (a replica loaded it again); False if it is not cached."""
        with self._lock:
            if model not in self._entries:
                return False
            self._touch(model)
            return True

    def pin(self, model: str) -> None:
        """A replica loaded `model`: keep its weights until the matching `unpin`. Pins count."""
        with self._lock:
            if model not in self._entries:
                raise WeightsCacheError(f"cannot pin {model!r}: its weights are not in this node's disk cache")
            self._pins[model] = self._pins.get(model, 0) + 1

    def unpin(self, model: str) -> None:
        with self._lock:
            count = self._pins.get(model, 0) - 1
            if count > 0:
                self._pins[model] = count
            else:
                self._pins.pop(model, None)

    def evict_for(self, size_bytes: int) -> list[str]:
        """Evict least recently used, unpinned weights until `size_bytes` fit; the evicted names.

        All or nothing: when pinned weights leave too little room, nothing is evicted.
        """
        with self._lock:
            return self._evict_for(size_bytes)

    def contents(self) -> list[CachedWeights]:
        """Cached models, most recently used first."""
        with self._lock:
            ordered = sorted(self._entries.items(), key=lambda kv: kv[1].seq, reverse=True)
            return [CachedWeights(m, e.size_bytes, e.last_used, m in self._pins) for m, e in ordered]

    # -- internals (called with the lock held) --

    def _check_fits(self, model: str, size_bytes: int) -> None:
        if size_bytes <= 0:
            raise ValueError(f"size_bytes of {model!r} must be positive, got {size_bytes}")
        if size_bytes > self._capacity:
            raise WeightsCacheError(
                f"model {model!r} needs {_gib(size_bytes)} but this node's weights cache holds "
                f"{_gib(self._capacity)} in all; it can never be cached here"
            )

    def _touch(self, model: str) -> None:
        self._seq += 1
        entry = self._entries[model]
        entry.last_used, entry.seq = self._clock(), self._seq
        self._write_index()

    def _evict_for(self, size_bytes: int) -> list[str]:
        need = size_bytes - self.free_bytes()
        if need <= 0:
            return []
        victims: list[str] = []
        for model, entry in sorted(self._entries.items(), key=lambda kv: kv[1].seq):
            if need <= 0:
                break
            if model not in self._pins:
                victims.append(model)
                need -= entry.size_bytes
        if need > 0:
            pinned = sorted(self._pins)
            held = []
            if pinned:
                pinned_bytes = sum(self._entries[m].size_bytes for m in pinned)
                held.append(f"loaded replicas pin {_gib(pinned_bytes)} ({', '.join(pinned)})")
            if self._reserved:
                held.append(f"{_gib(sum(self._reserved.values()))} is reserved for loads in flight")
            raise WeightsCacheError(
                f"cannot free {_gib(size_bytes)} in this node's weights cache: {' and '.join(held)}"
            )
        for model in victims:
            self._drop(model)
        log.info("evicted %s to make room for %d bytes", victims, size_bytes)
        return victims

    def _replace(self, model: str) -> None:
        if model in self._pins:
            raise WeightsCacheError(
                f"cannot replace the weights of {model!r} with a different size: a loaded replica uses them"
            )
        self._drop(model)

    def _drop(self, model: str) -> None:
        self._entries.pop(model, None)
        self._write_index()  # before the file goes, so the index never names a missing file
        self.path_of(model).unlink(missing_ok=True)

    def _write_index(self) -> None:
        data = {"version": _INDEX_VERSION, "models": {m: asdict(e) for m, e in self._entries.items()}}
        tmp = self._index_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
        os.replace(tmp, self._index_path)  # atomic: a crash leaves the old index or the new one

    def _read_index(self) -> dict[str, _Entry]:
        """The index as it was, minus entries whose file is gone or has the wrong size; files
        the index does not know (a crash between writing a file and the index) are deleted,
        since nothing says they are complete."""
        entries: dict[str, _Entry] = {}
        if self._index_path.exists():
            try:
                raw = json.loads(self._index_path.read_text())
                entries = {m: _Entry(**e) for m, e in raw["models"].items()}
            except (ValueError, KeyError, TypeError) as e:
                log.warning("weights cache index %s is unreadable (%s); starting empty", self._index_path, e)
        for model, entry in list(entries.items()):
            path = self.path_of(model)
            if not path.is_file() or path.stat().st_size != entry.size_bytes:
                log.warning("weights of %s are missing or truncated on disk; dropping them", model)
                del entries[model]
        known = {self.path_of(m).name for m in entries}
        for path in self._dir.iterdir():
            if path.name not in known and path.suffix == ".weights":
                path.unlink(missing_ok=True)
        return entries


def _gib(size_bytes: int) -> str:
    return f"{size_bytes / 2**30:.1f} GiB"
