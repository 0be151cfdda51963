"""A prompt counted as the engine counts it: the model's chat template rendered, then its tokenizer.

The rendering is the llama.cpp engine's own (`orchestrator.engines.llamacpp.chat.ChatTemplate`), so
the count and the engine's `usage.prompt_tokens` come from the same text: the engine tokenizes the
rendered prompt with special tokens parsed, adding BOS only where the model asks for one
(`tokenizer.ggml.add_bos_token`) and the template did not write it; so does this.

Counting must stay cheap (the node's step and the control plane's prepare count every step's whole
conversation): the text is split at the template's special tokens, which both tokenizers match before
anything else, so each piece between them tokenizes alone; a conversation grows by a message a step,
so all but its newest pieces are remembered.
"""

from __future__ import annotations

import hashlib
import re
import threading
from typing import Any

from activities.step.tokens import count_prompt_tokens
from orchestrator.engines.llamacpp.chat import ChatTemplate, ChatTemplateError
from sdk.wire.prompt_count import PromptCount

from .vocab import TokenizerUnreadable, Vocabulary

_PIECES_MAX = 50_000  # remembered piece counts per model; a piece is a message's text or so


class ModelTokenizer:
    """One model's tokenizer and chat template; implements sdk.wire.prompt_count.PromptTokenizer."""

    def __init__(self, vocabulary: Vocabulary, file: str) -> None:
        if not vocabulary.chat_template:
            raise TokenizerUnreadable(
                file,
                "it holds no chat template (tokenizer.chat_template), so the prompt an "
                "engine renders cannot be counted",
            )
        try:
            self.template = ChatTemplate(vocabulary.chat_template, vocabulary.bos_token, vocabulary.eos_token)
        except Exception as exc:  # a template jinja cannot compile
            raise TokenizerUnreadable(file, f"its chat template does not compile: {exc}") from None
        self.file = file
        self._tokenizer = vocabulary.tokenizer
        self._bos = vocabulary.bos_token if vocabulary.adds_bos else None
        self._uncounted_from = vocabulary.uncounted_from
        specials = sorted(
            (t.content for t in vocabulary.tokenizer.get_added_tokens_decoder().values()), key=len, reverse=True
        )
        self._split = re.compile("(" + "|".join(map(re.escape, specials)) + ")") if specials else None
        self._specials = frozenset(specials)
        self._pieces: dict[bytes, int] = {}
        self._evicting = threading.Lock()

    def count_prompt(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> PromptCount:
        """The prompt tokens the engine will report for this request. A conversation the template refuses
        (the engine refuses it too, and no tokens are spent) is counted by litellm's formula instead, inexact."""
        try:
            text = self.render(messages, tools)
        except ChatTemplateError:
            return PromptCount(count_prompt_tokens(messages, tools), exact=False)
        return PromptCount(self.count_text(text), exact=True)

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
        return self.template.render(messages, tools or None).text

    def count_text(self, text: str) -> int:
        """Tokens of a rendered prompt as the engine tokenizes it: special tokens parsed, BOS where it adds one."""
        bos = 1 if self._bos is not None and not (self._bos and text.startswith(self._bos)) else 0
        if self._split is None:
            return bos + self._encoded_tokens(text)
        total = bos
        for piece in self._split.split(text):
            if not piece:
                continue
            if piece in self._specials:
                total += 1
                continue
            key = hashlib.blake2b(piece.encode("utf-8", "surrogatepass"), digest_size=16).digest()
            known = self._pieces.get(key)
            if known is None:
                known = self._remember(key, self._encoded_tokens(piece))
            total += known
        return total

    def encode(self, text: str) -> list[int]:
        """The token ids the engine would give `text` (special tokens parsed, no BOS)."""
        ids = self._tokenizer.encode(text, add_special_tokens=False).ids
        return ids if self._uncounted_from is None else [i for i in ids if i < self._uncounted_from]

    def _encoded_tokens(self, text: str) -> int:
        ids = self._tokenizer.encode(text, add_special_tokens=False).ids
        if self._uncounted_from is None:
            return len(ids)
        return len(ids) - sum(1 for i in ids if i >= self._uncounted_from)

    def _remember(self, key: bytes, tokens: int) -> int:
        self._pieces[key] = tokens
        if len(self._pieces) > _PIECES_MAX:
            with self._evicting:
                while len(self._pieces) > _PIECES_MAX:
                    try:
                        del self._pieces[next(iter(self._pieces))]
                    except (KeyError, StopIteration, RuntimeError):  # another thread evicted meanwhile
                        break
        return tokens
