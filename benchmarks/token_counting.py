"""How far a self-hosted model's prompt count is from what its engine reports, by the model's own tokenizer and by
gpt-4o's (litellm's formula, what Berth used for every model before).

One llama.cpp engine (the Berth-owned server, `orchestrator.engines.llamacpp`, SmolLM2-135M-Instruct Q4_1 on the
CPU) answers 200 varied chat requests with one token each, sent as the LLM step sends them (litellm's
`hosted_vllm/` route); its `usage.prompt_tokens` is the truth. Each request is also counted by:
- **own**: `orchestrator.tokenizers` (the GGUF's vocabulary through `tokenizers`, its chat template rendered as
  the engine renders it): what reservations now use for the model;
- **gpt-4o**: `activities.step.tokens.count_prompt_tokens` (litellm, tiktoken o200k), with and without the
  reservation margin (2% + 8) it was reserved with.
Then the cost of counting: loading the tokenizer (from the origin, then from the data dir's copy), and counting
a 2,000-token conversation, fresh and as a grown conversation is (all but its newest message counted before).

Goal (issue 17): exact for the local engine.

    python -m benchmarks.token_counting [--prompts 200]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from activities.step.tokens import _litellm, count_prompt_tokens  # noqa: E402
from orchestrator.catalogue import SEED_MODELS  # noqa: E402
from orchestrator.tokenizers import ModelTokenizers, TokenizerFiles  # noqa: E402
from sdk.wire.limits import reservation_margin  # noqa: E402

from ._results import write_results  # noqa: E402

MODEL = "smollm2-135m"
SNIPPETS = (
    "What is the capital of France?",
    "Explain a KV cache in one sentence.",
    "Write a haiku about the sea.",
    "東京は日本の首都です。",
    "naïve café résumé — déjà vu",
    "Ελληνικά και русский язык",
    "مرحبا بالعالم",
    "emoji 🙂🚀 👩‍👩‍👧 🇫🇷",
    "```python\ndef area(r):\n    return 3.14159 * r ** 2\n```",
    '{"city": "Paris", "population": 2102650, "tags": ["capital", "seine"]}',
    "1234567890 + 987654321 = ?",
    "  indented\n\n\ttabbed\r\nwindows line",
    "SELECT name FROM users WHERE id = 42;",
    "I'll, we've, they're, don't",
    "<|im_end|> is a special token written as text",
    "A long sentence about distributed systems, consensus, "
    "leases, heartbeats and the many ways a node can fail without anyone noticing for a while.",
)


def conversation(rng: random.Random) -> list[dict[str, Any]]:
    """One varied request: with or without a system message, 1 to 6 turns, tool calls and results among them."""

    def text() -> str:
        return " ".join(rng.choice(SNIPPETS) for _ in range(rng.choice((1, 1, 1, 2, 3, 8))))

    messages: list[dict[str, Any]] = []
    if rng.random() < 0.5:
        messages.append({"role": "system", "content": rng.choice(("You are terse.", "Answer as a pirate.", text()))})
    for turn in range(rng.randint(1, 4)):
        messages.append({"role": "user", "content": text()})
        if rng.random() < 0.2:
            call_id = f"call_{turn}"
            messages.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": call_id,
                            "type": "function",
                            "function": {
                                "name": "search",
                                "arguments": json.dumps({"q": rng.choice(SNIPPETS)}, ensure_ascii=False),
                            },
                        }
                    ],
                }
            )
            messages.append({"role": "tool", "tool_call_id": call_id, "content": text()})
        messages.append({"role": "assistant", "content": text()})
    messages.pop()  # ends on the user's (or a tool's) turn
    return messages


def engine_prompt_tokens(base_url: str, messages: list[dict[str, Any]]) -> int:
    """The engine's own count, asked as the LLM step asks (litellm's hosted_vllm route)."""
    reply = _litellm().completion(
        model=f"hosted_vllm/{MODEL}",
        api_base=base_url,
        api_key="bench",
        messages=messages,
        max_tokens=1,
        temperature=0,
        **{"no-log": True},
    )
    return int(reply.usage.prompt_tokens)


def _errors(counted: list[int], truth: list[int]) -> dict[str, Any]:
    diffs = [c - t for c, t in zip(counted, truth)]
    return {
        "exact": sum(d == 0 for d in diffs),
        "prompts": len(diffs),
        "mean_abs_error_tokens": round(statistics.fmean(abs(d) for d in diffs), 2),
        "max_under_tokens": -min(0, min(diffs)),
        "max_over_tokens": max(0, max(diffs)),
        "mean_relative_error_pct": round(100 * statistics.fmean(d / t for d, t in zip(diffs, truth)), 2),
        "under_counted": sum(d < 0 for d in diffs),
    }


def _timed_ms(fn: Any, n: int) -> float:
    fn()
    started = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - started) / n * 1e3


def counting_cost(tokenizers: ModelTokenizers, entry: Any) -> dict[str, float]:
    tokenizer = tokenizers.for_entry(entry)
    rng = random.Random(7)
    base = [{"role": "system", "content": "You are terse."}]
    while tokenizer.count_prompt(base, None).tokens < 2000:
        base.append(
            {
                "role": "user" if len(base) % 2 else "assistant",
                "content": " ".join(rng.choice(SNIPPETS) for _ in range(6)),
            }
        )
    tokens = tokenizer.count_prompt(base, None).tokens
    fresh = iter(range(10**9))
    grown = base[:-1]
    return {
        "prompt_tokens": tokens,
        # a conversation none of whose pieces was seen: every message tokenized
        "fresh_ms": round(
            _timed_ms(
                lambda: tokenizer.count_text(
                    tokenizer.render([{**m, "content": f"{next(fresh)} {m['content']}"} for m in base], None)
                ),
                50,
            ),
            3,
        ),
        # the step's case: the conversation grew by its newest message since the last count
        "grown_by_one_message_ms": round(
            _timed_ms(
                lambda: tokenizer.count_prompt(
                    [*grown, {"role": "user", "content": f"{next(fresh)} " + base[-1]["content"]}], None
                ),
                200,
            ),
            3,
        ),
        "recounted_ms": round(_timed_ms(lambda: tokenizer.count_prompt(base, None), 1000), 3),
        "gpt4o_litellm_recounted_ms": round(_timed_ms(lambda: count_prompt_tokens(base, None), 1000), 3),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.token_counting", description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=200)
    args = parser.parse_args(argv)
    from orchestrator.engines.llamacpp.model import LlamaModel
    from orchestrator.engines.llamacpp.server import EngineThread
    from orchestrator.weights.fetchers import PackageFetcher
    from orchestrator.weights.files import Revision

    entry = next(m for m in SEED_MODELS if m.name == MODEL)
    revision = Revision.of(entry)
    assert revision is not None and entry.weights is not None
    gguf = PackageFetcher().path_of(revision, next(f for f in revision.files if f.path == entry.weights.tokenizer))

    with tempfile.TemporaryDirectory() as data_dir:
        started = time.perf_counter()
        tokenizers = ModelTokenizers(TokenizerFiles(Path(data_dir)))
        own = tokenizers.for_entry(entry)
        load_origin_s = time.perf_counter() - started
        started = time.perf_counter()
        ModelTokenizers(TokenizerFiles(Path(data_dir))).for_entry(entry)
        load_kept_s = time.perf_counter() - started
        cost = counting_cost(tokenizers, entry)
    assert own is not None

    rng = random.Random(17)
    requests = [conversation(rng) for _ in range(args.prompts)]
    with EngineThread(LlamaModel(gguf, n_ctx=8192), MODEL) as engine:
        truth = []
        for i, messages in enumerate(requests, 1):
            truth.append(engine_prompt_tokens(engine.base_url, messages))
            if i % 50 == 0:
                print(f"{i}/{len(requests)} requests answered", flush=True)
    own_counts = [own.count_prompt(m, None).tokens for m in requests]
    gpt4o = [count_prompt_tokens(m, None) for m in requests]
    figures = {
        "model": MODEL,
        "engine": "orchestrator.engines.llamacpp (llama.cpp via llama-cpp-python), through litellm",
        "prompt_tokens": {"min": min(truth), "median": int(statistics.median(truth)), "max": max(truth)},
        "own_tokenizer": _errors(own_counts, truth),
        "gpt4o_litellm": _errors(gpt4o, truth),
        "gpt4o_litellm_with_margin": _errors([c + reservation_margin(c) for c in gpt4o], truth),
        "tokenizer_load_s": {"from_origin": round(load_origin_s, 3), "from_data_dir": round(load_kept_s, 3)},
        "counting_cost": cost,
        "goal": "own tokenizer exact on every prompt",
    }
    figures["goal_met"] = figures["own_tokenizer"]["exact"] == len(requests)
    path = write_results("token_counting", figures)
    print(json.dumps(figures, indent=2))
    print(f"written to {path}")
    return 0 if figures["goal_met"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
