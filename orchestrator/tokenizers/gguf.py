"""The metadata of a GGUF file: the key-value section at its start, read from a stream of its bytes.

GGUF (https://github.com/ggml-org/ggml/blob/master/docs/gguf.md) begins with a small header
(magic `GGUF`, version, tensor count, key-value count) and then the key-values, before the tensor
infos and the tensors. A model's tokenizer (`tokenizer.ggml.*`) and chat template
(`tokenizer.chat_template`) are key-values, so the first megabytes of a file of any size hold them:
this reader consumes the stream only as far as the key-values go, which is what lets the control
plane read a remote GGUF's tokenizer without fetching its weights.

A small reader of our own rather than the `gguf` package: that one memory-maps a whole local file
(and parses every tensor info), where this needs to stop early on a stream (an HTTP body, a
fetcher's chunks) and needs nothing but the standard library.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from typing import Any

MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)  # version 1 (2023, 32-bit counts) predates every model in use today
# Bounds on what a header may claim, so a corrupt or hostile file is refused instead of filling memory:
# Llama 3's vocabulary is 128,256 tokens and 280,147 merges; a million of either is no real model.
MAX_KEYS = 65_536
MAX_ARRAY_ITEMS = 4_000_000
MAX_STRING_BYTES = 64 * 2**20  # a chat template is kilobytes; 64 MiB is no string a tokenizer has

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
_U64 = struct.Struct("<Q")


class GgufUnreadable(ValueError):
    """The bytes are not a GGUF file's metadata Berth can read; the message says what is wrong and where."""


class GgufTruncated(GgufUnreadable):
    """The stream ended inside the metadata: a reader of a prefix should ask for more bytes."""


class _Bytes:
    """Exact reads over an iterator of chunks, counting the offset for error messages. A vocabulary is
    ~100k small strings: reads move a position over the buffer, which is compacted only when refilled."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks: Iterator[bytes] = iter(chunks)
        self._buffer = b""
        self._at = 0
        self._consumed = 0  # bytes dropped from the buffer's front

    @property
    def offset(self) -> int:
        return self._consumed + self._at

    def take(self, n: int) -> bytes:
        end = self._at + n
        if end > len(self._buffer):
            parts = [self._buffer[self._at :]]
            have = len(parts[0])
            while have < n:
                chunk = next(self._chunks, None)
                if chunk is None:
                    raise GgufTruncated(f"the file ends at byte {self.offset + have:,}, inside its metadata")
                parts.append(chunk)
                have += len(chunk)
            self._consumed += self._at
            self._buffer, self._at, end = b"".join(parts), 0, n
        out = self._buffer[self._at : end]
        self._at = end
        return out

    def unpack(self, fmt: str) -> Any:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def strings(self, n: int) -> list[str]:
        """`n` length-prefixed strings: a vocabulary's tokens or merges, read without a call per piece when
        the buffer holds them (a few microseconds a call, times 150k strings, is most of a second)."""
        out: list[str] = []
        buffer, at, end = self._buffer, self._at, len(self._buffer)
        while len(out) < n:
            if at + 8 <= end:
                size = _U64.unpack_from(buffer, at)[0]
                if at + 8 + size <= end and size <= MAX_STRING_BYTES:
                    out.append(buffer[at + 8 : at + 8 + size].decode("utf-8"))
                    at += 8 + size
                    continue
            self._at = at  # near the buffer's end (or too long): the careful path, which refills
            out.append(_string(self, "a string"))
            buffer, at, end = self._buffer, self._at, len(self._buffer)
        self._at = at
        return out


def read_metadata(chunks: Iterable[bytes]) -> dict[str, Any]:
    """The key-values of the GGUF file whose bytes `chunks` yields from its start (arrays as lists, strings
    decoded). Reads no further than the last key-value. GgufUnreadable (GgufTruncated when the bytes stop
    early) names the offset and the key it was reading."""
    data = _Bytes(chunks)
    magic = data.take(4)
    if magic != MAGIC:
        raise GgufUnreadable(f"not a GGUF file: it starts with {magic!r}, not {MAGIC!r}")
    version = data.unpack("<I")
    if version not in SUPPORTED_VERSIONS:
        raise GgufUnreadable(
            f"GGUF version {version} is not supported (only {', '.join(map(str, SUPPORTED_VERSIONS))})"
        )
    data.unpack("<Q")  # tensor count: the tensors are the engine's business
    count = data.unpack("<Q")
    if count > MAX_KEYS:
        raise GgufUnreadable(f"the header claims {count:,} metadata keys (at most {MAX_KEYS:,})")
    metadata: dict[str, Any] = {}
    for _ in range(count):
        key = _string(data, "a key")
        try:
            metadata[key] = _value(data, data.unpack("<I"))
        except GgufTruncated:
            raise
        except (GgufUnreadable, UnicodeDecodeError, struct.error) as exc:
            raise GgufUnreadable(f"metadata key {key!r} (byte {data.offset:,}): {exc}") from None
    return metadata


def _string(data: _Bytes, what: str) -> str:
    n = data.unpack("<Q")
    if n > MAX_STRING_BYTES:
        raise GgufUnreadable(f"{what} of {n:,} bytes at byte {data.offset:,} (at most {MAX_STRING_BYTES:,})")
    return data.take(n).decode("utf-8")


def _value(data: _Bytes, kind: int) -> Any:
    if kind in _SCALARS:
        return data.unpack(_SCALARS[kind])
    if kind == _STRING:
        return _string(data, "a string")
    if kind == _ARRAY:
        item_kind, n = data.unpack("<I"), data.unpack("<Q")
        if n > MAX_ARRAY_ITEMS:
            raise GgufUnreadable(f"an array of {n:,} items (at most {MAX_ARRAY_ITEMS:,})")
        if item_kind in _SCALARS:  # one read for the whole array: a vocabulary's token types are 100k numbers
            fmt = _SCALARS[item_kind]
            return list(struct.unpack(f"<{n}{fmt[1:]}", data.take(n * struct.calcsize(fmt))))
        if item_kind == _STRING:
            return data.strings(n)
        return [_value(data, item_kind) for _ in range(n)]
    raise GgufUnreadable(f"unknown value type {kind}")
