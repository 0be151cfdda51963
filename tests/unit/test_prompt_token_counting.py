"""count_prompt_tokens remembers per-message counts; its totals must equal litellm's count exactly.

Budget reservations and the simulated engine's usage both come from this function, and the
ledger is checked against the engine's usage to the token, so "close" is not good enough.
"""

from __future__ import annotations

import json
import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from activities.step import tokens  # noqa: E402


def litellm_count(messages, tools):
    return int(tokens._litellm().token_counter(model=tokens.COUNTING_MODEL, messages=messages, tools=tools or None))


text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=60) | st.sampled_from(
    ["", " ", "observed t1", "<|endoftext|>", "ünïcödé ✓ 漢字", "a" * 300, '{"topic": "t1"}']
)
ident = st.from_regex(r"[a-z_][a-z0-9_]{0,12}", fullmatch=True)

tool_call = st.builds(
    lambda i, name, args: {"id": i, "type": "function", "function": {"name": name, "arguments": args}},
    ident,
    ident,
    text | st.dictionaries(ident, text, max_size=3).map(json.dumps),
)
message = st.one_of(
    st.builds(lambda c: {"role": "system", "content": c}, text),
    st.builds(lambda c: {"role": "user", "content": c}, text),
    st.builds(lambda c, n: {"role": "user", "content": c, "name": n}, text, ident),
    st.builds(
        lambda parts: {"role": "user", "content": [{"type": "text", "text": p} for p in parts]},
        st.lists(text, max_size=3),
    ),
    st.builds(lambda c: {"role": "assistant", "content": c}, text),
    st.builds(
        lambda c, calls: {"role": "assistant", "content": c, "tool_calls": calls},
        st.none() | text,
        st.lists(tool_call, min_size=1, max_size=3),
    ),
    st.builds(lambda i, n, c: {"role": "tool", "tool_call_id": i, "name": n, "content": c}, ident, ident, text),
)
schema = st.recursive(
    st.builds(lambda t, d: {"type": t, "description": d}, st.sampled_from(["string", "integer", "boolean"]), text),
    lambda inner: st.builds(
        lambda props: {"type": "object", "properties": props, "required": sorted(props)[:1]},
        st.dictionaries(ident, inner, max_size=3),
    ),
    max_leaves=6,
)
tool = st.builds(
    lambda n, d, p: {"type": "function", "function": {"name": n, "description": d, "parameters": p}},
    ident,
    text,
    schema,
)
tools_strategy = st.none() | st.lists(tool, max_size=3)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(message, max_size=12), tools_strategy, st.lists(message, max_size=4))
def test_count_equals_litellm_for_whole_conversations(messages, tools, more):
    assert tokens.count_prompt_tokens(messages, tools) == litellm_count(messages, tools)
    # Counted again, now from remembered parts, and grown as a conversation grows.
    assert tokens.count_prompt_tokens(messages, tools) == litellm_count(messages, tools)
    grown = messages + more
    assert tokens.count_prompt_tokens(grown, tools) == litellm_count(grown, tools)
    # The same messages under other tools (or none): the tool term is remembered separately.
    assert tokens.count_prompt_tokens(grown, None) == litellm_count(grown, None)


def test_a_tool_conversation_of_a_hundred_steps():
    tools = tokens.sendable_tools(
        [
            {
                "type": "function",
                "function": {
                    "name": "observe",
                    "description": "Return an observation about the topic.",
                    "parameters": {
                        "type": "object",
                        "properties": {"topic": {"type": "string"}},
                        "required": ["topic"],
                        "additionalProperties": False,
                    },
                },
            }
        ]
    )
    messages = [
        {"role": "system", "content": "Observe each topic, then answer."},
        {"role": "user", "content": "; ".join(f"t{i}" for i in range(99))},
    ]
    for i in range(99):
        assert tokens.count_prompt_tokens(messages, tools) == litellm_count(messages, tools)
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"call_{i}",
                        "type": "function",
                        "function": {"name": "observe", "arguments": f'{{"topic": "t{i}"}}'},
                    }
                ],
            }
        )
        messages.append({"role": "tool", "tool_call_id": f"call_{i}", "name": "observe", "content": f"observed t{i}"})
    assert tokens.count_prompt_tokens(messages, tools) == litellm_count(messages, tools)


def test_values_that_differ_only_in_type_are_not_confused():
    # litellm counts a list content part by part but skips a tuple: one must not be served the other's count.
    as_list = [{"role": "user", "content": [{"type": "text", "text": "hello there"}]}]
    as_tuple = [{"role": "user", "content": ({"type": "text", "text": "hello there"},)}]
    assert tokens.count_prompt_tokens(as_list) == litellm_count(as_list, None)
    assert tokens.count_prompt_tokens(as_tuple) == litellm_count(as_tuple, None)
    assert litellm_count(as_list, None) != litellm_count(as_tuple, None)


def test_messages_that_are_not_plain_dicts_are_counted_directly():
    class Odd(dict):
        pass

    messages = [Odd(role="user", content="hi"), {"role": "assistant", "content": "hello"}]
    assert tokens.count_prompt_tokens(messages) == litellm_count(messages, None)


def test_an_unreadable_message_fails_as_litellm_does():
    bad = [{"role": "assistant", "tool_calls": "not a list"}]
    with pytest.raises(ValueError):
        litellm_count(bad, None)
    with pytest.raises(ValueError):
        tokens.count_prompt_tokens(bad)


def test_the_cache_stays_bounded(monkeypatch):
    monkeypatch.setattr(tokens, "_PART_CACHE_MAX", 5)
    for i in range(20):
        messages = [{"role": "user", "content": f"message {i}"}]
        assert tokens.count_prompt_tokens(messages) == litellm_count(messages, None)
    assert len(tokens._part_tokens) <= 5
