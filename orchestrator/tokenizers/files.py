"""Where a process gets a model's tokenizer from: the entry's origin, once, then its own data dir.

The control plane counts every fleet step's prompt but holds no node's weights cache, so it reads the
tokenizer from the catalogue entry's origin through the same fetchers a node fills its cache with
(orchestrator/weights/fetchers: file://, package://, http(s)://, hf://, s3://):
- a GGUF file's tokenizer is in its metadata, at the start of the file: the transfer is read only as
  far as the metadata goes (about 1.8 MB of SmolLM2's 98 MB; a few MB of any model) and then closed;
  those bytes are kept as `<data_dir>/tokenizers/<sha256>.gguf-head`. A prefix cannot be checked
  against the file's sha256, so the origin's size for the file is checked instead where it says one;
- a tokenizer.json (and the tokenizer_config.json beside it, which holds the chat template) is read
  whole and kept as `<sha256>.json` once its sha256 matches the catalogue's.
The cache is keyed by the catalogue's sha256 of the file, so a new revision is a new entry and two
models sharing a file share it. Reading is blocking I/O: callers run it in a thread.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from orchestrator.weights.fetchers import TransferCut, WeightsFetchError, origin_fetcher
from orchestrator.weights.files import Revision, RevisionFile
from sdk.wire.catalogue import ModelEntry

from .gguf import GgufUnreadable, read_metadata
from .vocab import TokenizerUnreadable, Vocabulary, from_gguf_metadata, from_tokenizer_json, parse_tokenizer_config

TOKENIZER_CONFIG = "tokenizer_config.json"
MAX_JSON_BYTES = 64 * 2**20  # the largest tokenizer.json in use (Gemma 3's) is 33 MB


class TokenizerFiles:
    """Reads entries' tokenizers from their origins into `cache_dir`, and back from there."""

    def __init__(self, cache_dir: Path) -> None:
        self.cache_dir = cache_dir

    def vocabulary(self, entry: ModelEntry) -> Vocabulary:
        """The tokenizer `entry.weights.tokenizer` names. TokenizerUnreadable names the file and the reason."""
        revision = Revision.of(entry)
        assert revision is not None and entry.weights is not None and entry.weights.tokenizer is not None
        file = next(f for f in revision.files if f.path == entry.weights.tokenizer)
        named = f"{entry.name}: {file.path}"
        try:
            if file.path.endswith(".gguf"):
                return self._from_gguf(revision, file, named)
            return self._from_json(revision, file, named)
        except WeightsFetchError as exc:
            raise TokenizerUnreadable(named, f"cannot be read from the origin: {exc}") from None
        except TransferCut as exc:
            raise TokenizerUnreadable(named, f"the origin stopped sending it: {exc}", transient=True) from None
        except GgufUnreadable as exc:
            raise TokenizerUnreadable(named, f"its GGUF metadata cannot be read: {exc}") from None

    def _from_gguf(self, revision: Revision, file: RevisionFile, named: str) -> Vocabulary:
        head = self.cache_dir / f"{file.sha256}.gguf-head"
        if head.exists():
            return from_gguf_metadata(read_metadata(_chunks_of(head)), named)
        read: list[bytes] = []
        with origin_fetcher(revision).open(revision, file, 0) as transfer:
            if transfer.total is not None and transfer.total != file.size_bytes:
                raise TokenizerUnreadable(
                    named,
                    f"the origin's file is {transfer.total:,} bytes, the catalogue's "
                    f"{file.size_bytes:,}: not the catalogue's file",
                )

            def chunks() -> Iterator[bytes]:
                for chunk in transfer.chunks:
                    read.append(chunk)
                    yield chunk

            metadata = read_metadata(chunks())  # stops at the metadata's end: the transfer is closed unread
        vocabulary = from_gguf_metadata(metadata, named)
        _write(head, b"".join(read))
        return vocabulary

    def _from_json(self, revision: Revision, file: RevisionFile, named: str) -> Vocabulary:
        path = self._whole(revision, file, named)
        config_file = next((f for f in revision.files if f.path == _beside(file.path, TOKENIZER_CONFIG)), None)
        config = None
        if config_file is not None:
            config_named = f"{revision.model}: {config_file.path}"
            config = parse_tokenizer_config(self._whole(revision, config_file, config_named).read_bytes(), config_named)
        return from_tokenizer_json(path, config, named)

    def _whole(self, revision: Revision, file: RevisionFile, named: str) -> Path:
        kept = self.cache_dir / f"{file.sha256}.json"
        if kept.exists():
            return kept
        if file.size_bytes > MAX_JSON_BYTES:
            raise TokenizerUnreadable(
                named, f"{file.size_bytes:,} bytes is no tokenizer file (at most {MAX_JSON_BYTES:,})"
            )
        digest = hashlib.sha256()
        parts = []
        with origin_fetcher(revision).open(revision, file, 0) as transfer:
            for chunk in transfer.chunks:
                digest.update(chunk)
                parts.append(chunk)
        if digest.hexdigest() != file.sha256:
            raise TokenizerUnreadable(named, f"its sha256 is {digest.hexdigest()}, the catalogue's {file.sha256}")
        _write(kept, b"".join(parts))
        return kept


def _beside(path: str, name: str) -> str:
    folder = path.rpartition("/")[0]
    return f"{folder}/{name}" if folder else name


def _chunks_of(path: Path) -> Iterator[bytes]:
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            yield chunk


def _write(path: Path, data: bytes) -> None:
    """Whole or not at all: another process may be reading the cache directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".part")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
