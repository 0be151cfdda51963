"""A model's own tokenizer, as a `tokenizers.Tokenizer`: from a GGUF file's vocabulary or a tokenizer.json.

A GGUF file carries its tokenizer as metadata (`tokenizer.ggml.*`): the tokens, their types, the BPE
merges, and a pre-tokenizer named by `tokenizer.ggml.pre`, whose regular expressions live in
llama.cpp's source (src/llama-vocab.cpp), not in the file. So a GGUF vocabulary is rebuilt here only
for the pre-tokenizers whose llama.cpp expressions have an exact `tokenizers` equivalent, checked
token for token against llama.cpp itself (tests/unit/test_model_tokenizers.py); any other is refused
by name, with the way out (name the model's tokenizer.json instead), rather than counted nearly.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

# llama.cpp's token types (llama_token_type in llama.h): which tokens the prompt's text may name.
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6


def _gpt2() -> pre_tokenizers.PreTokenizer:
    # llama.cpp "gpt-2": 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S), byte-level:
    # exactly ByteLevel's own expression.
    return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)


def _smollm() -> pre_tokenizers.PreTokenizer:
    # llama.cpp "smollm" (also starcoder, refact, codeshell): \p{N} first, each digit its own piece, then
    # gpt-2's expression over the rest: SmolLM2's own tokenizer.json says the same (Digits, then ByteLevel).
    return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), _gpt2()])


# tokenizer.ggml.pre -> the same splitting in `tokenizers`; only those verified against llama.cpp.
PRE_TOKENIZERS = {"gpt-2": _gpt2, "smollm": _smollm, "starcoder": _smollm}


class TokenizerUnreadable(ValueError):
    """A model's tokenizer cannot be built from its file; the message names the file and the reason."""

    def __init__(self, file: str, reason: str, transient: bool = False) -> None:
        super().__init__(f"{file}: {reason}")
        self.file = file
        self.reason = reason
        self.transient = transient  # the origin stopped sending: reading it again may work


@dataclass(frozen=True)
class Vocabulary:
    """A tokenizer with what a chat template needs to be rendered with it."""

    tokenizer: Tokenizer
    chat_template: str | None
    bos_token: str
    eos_token: str
    adds_bos: bool = False  # the engine puts BOS in front of a prompt that does not start with it (a GGUF's say)
    uncounted_from: int | None = None  # ids from here on are placeholders the engine drops: not counted


def from_gguf_metadata(metadata: dict[str, Any], file: str) -> Vocabulary:
    """The tokenizer a GGUF file's metadata describes (`file` is for errors)."""
    kind = metadata.get("tokenizer.ggml.model")
    if kind != "gpt2":
        raise TokenizerUnreadable(
            file,
            f"tokenizer.ggml.model {kind!r} is not supported (only 'gpt2', byte-level "
            "BPE); name the model's tokenizer.json as its tokenizer instead",
        )
    pre = metadata.get("tokenizer.ggml.pre", "gpt-2")
    if pre not in PRE_TOKENIZERS:
        raise TokenizerUnreadable(
            file,
            f"tokenizer.ggml.pre {pre!r} is not among the pre-tokenizers Berth counts "
            f"exactly ({', '.join(sorted(PRE_TOKENIZERS))}); name the model's "
            "tokenizer.json as its tokenizer instead",
        )
    tokens = _list_of(metadata, "tokenizer.ggml.tokens", str, file)
    merges = _list_of(metadata, "tokenizer.ggml.merges", str, file)
    types = metadata.get("tokenizer.ggml.token_type") or [NORMAL] * len(tokens)
    if len(types) != len(tokens):
        raise TokenizerUnreadable(file, f"{len(types)} token types for {len(tokens)} tokens")
    pairs = []
    for i, merge in enumerate(merges):
        left, space, right = merge.partition(" ")
        if not space:
            raise TokenizerUnreadable(file, f"tokenizer.ggml.merges[{i}] {merge!r} is not two tokens")
        pairs.append((left, right))
    vocab = {t: i for i, t in enumerate(tokens)}
    # A byte the vocabulary has no token for (SmolLM2 lacks ten, among them 0x04 and 0xF1, the lead byte of
    # U+40000-U+7FFFF) stays a symbol of its own in llama.cpp's BPE, which no merge crosses, and is dropped
    # from the output; `tokenizers` would drop it first and merge its neighbours ("/\x04<" one token, not
    # two). So each gets a placeholder token past the vocabulary, which blocks merges alike and is not counted.
    missing = [c for c in pre_tokenizers.ByteLevel.alphabet() if c not in vocab]
    vocab.update({c: len(tokens) + i for i, c in enumerate(sorted(missing))})
    try:
        bpe = models.BPE(vocab=vocab, merges=pairs, fuse_unk=False, byte_fallback=False)
    except Exception as exc:  # tokenizers raises a bare Exception for a merge naming an unknown token
        raise TokenizerUnreadable(file, f"the vocabulary does not build: {exc}") from None
    tokenizer = Tokenizer(bpe)
    tokenizer.pre_tokenizer = PRE_TOKENIZERS[pre]()
    tokenizer.decoder = decoders.ByteLevel()
    # llama.cpp's tokenizer (with special parsing, as a chat prompt is tokenized) matches control and
    # user-defined tokens in the text before splitting the rest: `tokenizers`' added tokens do the same.
    tokenizer.add_special_tokens(
        [AddedToken(t, special=True, normalized=False) for t, k in zip(tokens, types) if k == CONTROL]
    )
    tokenizer.add_tokens(
        [AddedToken(t, special=False, normalized=False) for t, k in zip(tokens, types) if k == USER_DEFINED]
    )
    template = metadata.get("tokenizer.chat_template")
    return Vocabulary(
        tokenizer,
        template if isinstance(template, str) else None,
        _token_text(metadata, tokens, "tokenizer.ggml.bos_token_id"),
        _token_text(metadata, tokens, "tokenizer.ggml.eos_token_id"),
        adds_bos=metadata.get("tokenizer.ggml.add_bos_token") is True,
        uncounted_from=len(tokens) if missing else None,
    )


def from_tokenizer_json(path: Path, config: dict[str, Any] | None, file: str) -> Vocabulary:
    """A Hugging Face tokenizer.json, with the chat template and special tokens of its tokenizer_config.json.
    vLLM tokenizes a rendered chat prompt without adding special tokens (the template writes BOS), so no BOS."""
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises a bare Exception for a file it cannot parse
        raise TokenizerUnreadable(file, f"not a tokenizer.json the tokenizers package reads: {exc}") from None
    config = config or {}
    template = config.get("chat_template")
    if isinstance(template, list):  # [{"name": "default", "template": ...}, {"name": "tool_use", ...}]
        template = next(
            (t.get("template") for t in template if isinstance(t, dict) and t.get("name") == "default"), None
        )
    return Vocabulary(
        tokenizer,
        template if isinstance(template, str) else None,
        _special_text(config.get("bos_token")),
        _special_text(config.get("eos_token")),
    )


def parse_tokenizer_config(raw: bytes, file: str) -> dict[str, Any]:
    try:
        config = json.loads(raw)
    except ValueError as exc:
        raise TokenizerUnreadable(file, f"not JSON: {exc}") from None
    if not isinstance(config, dict):
        raise TokenizerUnreadable(file, "not a JSON object")
    return config


def _list_of(metadata: dict[str, Any], key: str, kind: type, file: str) -> list[Any]:
    value = metadata.get(key)
    if not isinstance(value, list) or not value or not all(isinstance(v, kind) for v in value):
        raise TokenizerUnreadable(file, f"{key} is missing or not a list of {kind.__name__}")
    return value


def _token_text(metadata: dict[str, Any], tokens: list[str], key: str) -> str:
    index = metadata.get(key)
    return tokens[index] if isinstance(index, int) and 0 <= index < len(tokens) else ""


def _special_text(value: Any) -> str:
    if isinstance(value, dict):  # {"content": "<s>", "lstrip": false, ...}
        value = value.get("content")
    return value if isinstance(value, str) else ""
