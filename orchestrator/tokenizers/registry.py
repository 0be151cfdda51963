"""Each model's tokenizer, loaded once per process.

Loading costs a read of the origin and about half a second of CPU (SmolLM2's 49k-token vocabulary),
so it happens once per tokenizer file (by its sha256) and, at start, in a thread (`warm`), never on the
event loop; a step that arrives before then loads it in its own worker thread and waits for that one
load. A tokenizer that cannot be loaded is remembered for a minute, so a broken origin costs one read
a minute rather than one a step.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from sdk.wire.catalogue import ModelEntry

from .counting import ModelTokenizer
from .files import TokenizerFiles
from .vocab import TokenizerUnreadable

log = logging.getLogger(__name__)
RETRY_FAILED_AFTER_S = 60.0


@dataclass(frozen=True)
class _Failed:
    error: TokenizerUnreadable
    at: float


class ModelTokenizers:
    """The catalogue entries' own tokenizers: `for_entry` is None for a model counted by litellm (hosted,
    simulated, or real weights naming no tokenizer)."""

    def __init__(self, files: TokenizerFiles) -> None:
        self.files = files
        self._loaded: dict[str, ModelTokenizer | _Failed] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()
        self._loading: set[str] = set()

    def for_entry(self, entry: ModelEntry | None) -> ModelTokenizer | None:
        """The entry's tokenizer, loading it the first time (blocking: call from a thread). Raises
        TokenizerUnreadable, naming the file, when it cannot be loaded."""
        key = _key(entry)
        if key is None:
            return None
        assert entry is not None and entry.weights is not None  # _key keys only weights that name a tokenizer
        known = self._loaded.get(key)
        if isinstance(known, ModelTokenizer):
            return known
        with self._lock(key):
            known = self._loaded.get(key)
            if isinstance(known, ModelTokenizer):
                return known
            if isinstance(known, _Failed) and time.monotonic() - known.at < RETRY_FAILED_AFTER_S:
                raise known.error
            try:
                vocabulary = self.files.vocabulary(entry)
                loaded = ModelTokenizer(vocabulary, f"{entry.name}: {entry.weights.tokenizer}")
            except TokenizerUnreadable as exc:
                self._loaded[key] = _Failed(exc, time.monotonic())
                raise
            self._loaded[key] = loaded
            return loaded

    def ready(self, entry: ModelEntry | None) -> ModelTokenizer | None:
        """The entry's tokenizer if it is loaded; else None, and it starts loading in a thread. For callers on an
        event loop (a node routing a step), which count by litellm's formula until it is there."""
        key = _key(entry)
        if key is None:
            return None
        known = self._loaded.get(key)
        if isinstance(known, ModelTokenizer):
            return known
        with self._guard:
            if key in self._loading:
                return None
            self._loading.add(key)
        threading.Thread(target=self._load_quietly, args=(entry, key), name=f"tokenizer-{key[:8]}", daemon=True).start()
        return None

    def _load_quietly(self, entry: ModelEntry, key: str) -> None:
        try:
            self.for_entry(entry)
        except TokenizerUnreadable as exc:
            log.warning("model %s is counted by litellm's formula on this node: %s", entry.name, exc)
        finally:
            with self._guard:
                self._loading.discard(key)

    async def warm(self, entries: Iterable[ModelEntry]) -> None:
        """Load the tokenizers of `entries` in a thread each; one that fails is logged, and its steps will say why."""

        async def load(entry: ModelEntry) -> None:
            try:
                await asyncio.to_thread(self.for_entry, entry)
            except TokenizerUnreadable as exc:
                log.warning("model %s will not be counted by its own tokenizer until it loads: %s", entry.name, exc)

        await asyncio.gather(*(load(e) for e in entries if _key(e) is not None))

    def _lock(self, key: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(key, threading.Lock())


_per_data_dir: dict[Path, ModelTokenizers] = {}
_per_data_dir_guard = threading.Lock()


def tokenizers_under(data_dir: Path) -> ModelTokenizers:
    """This process's tokenizers, kept under `data_dir`/tokenizers: one registry per data dir, so the API's
    step routes, its warm-up and a node agent in the same process load each tokenizer once."""
    key = data_dir.resolve()
    with _per_data_dir_guard:
        if key not in _per_data_dir:
            _per_data_dir[key] = ModelTokenizers(TokenizerFiles(key / "tokenizers"))
        return _per_data_dir[key]


def _key(entry: ModelEntry | None) -> str | None:
    """The tokenizer file's sha256: what the process loads once, whichever models name it."""
    if entry is None or entry.provider == "hosted" or entry.weights is None or entry.weights.tokenizer is None:
        return None
    return next(f.sha256 for f in entry.weights.files if f.path == entry.weights.tokenizer)
