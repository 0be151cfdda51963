"""The simulated model's reply policy: deterministic plans that make agents do multi-step work."""

from __future__ import annotations

import json
from typing import Any

from orchestrator.engines.simulated.policy import PlannedCall, Reply, fill_arguments, parse_input, reply

MODEL = "llama-3.1-8b"


def _tool(name: str, properties: dict[str, Any] | None = None, required: list[str] | None = None) -> dict[str, Any]:
    params: dict[str, Any] = {"type": "object", "properties": properties or {}}
    if required is not None:
        params["required"] = required
    return {"type": "function", "function": {"name": name, "description": "", "parameters": params}}


SEARCH = _tool("search", {"query": {"type": "string"}}, ["query"])
FETCH = _tool("fetch", {"url": {"type": "string"}}, ["url"])
SPAWN = _tool(
    "spawn_agent",
    {"agent": {"type": "string"}, "input": {"type": "string"}, "tokens": {"type": "integer"}},
    ["agent", "input"],
)
ASK = _tool("ask_human", {"question": {"type": "string"}}, ["question"])


def _user(text: str) -> list[dict[str, Any]]:
    return [{"role": "system", "content": "You are a careful agent."}, {"role": "user", "content": text}]


def _answer_calls(messages: list[dict[str, Any]], out: Reply, result: str = "ok") -> list[dict[str, Any]]:
    """The conversation after the agent ran `out`'s calls, each returning `result` (or a per-call text)."""
    messages = messages + [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in out.tool_calls
            ],
        }
    ]
    return messages + [
        {"role": "tool", "tool_call_id": c.id, "content": f"{result} for {c.arguments}"} for c in out.tool_calls
    ]


def _run(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, result: str = "ok", limit: int = 50
) -> tuple[list[list[PlannedCall]], Reply, list[dict[str, Any]]]:
    """Drive the policy like an agent loop until it answers; return each turn's calls and the answer."""
    turns: list[list[PlannedCall]] = []
    for _ in range(limit):
        out = reply(MODEL, messages, tools)
        if out.content is not None:
            return turns, out, messages
        turns.append(list(out.tool_calls))
        messages = _answer_calls(messages, out, result)
    raise AssertionError("the policy never answered")


def _args(call: PlannedCall) -> dict[str, Any]:
    return json.loads(call.arguments)


def test_same_conversation_gives_the_same_reply_every_time() -> None:
    messages = _user("postgres; sqlite\ndelegate to researcher: history of SQL")
    first = reply(MODEL, messages, [SEARCH, SPAWN])
    assert all(reply(MODEL, [dict(m) for m in messages], [SEARCH, SPAWN]) == first for _ in range(5))
    turns, answer, _ = _run(messages, [SEARCH, SPAWN])
    assert _run(messages, [SEARCH, SPAWN])[1] == answer
    assert [c.id for t in turns for c in t] == [c.id for t in _run(messages, [SEARCH, SPAWN])[0] for c in t]


def test_a_reply_is_either_text_or_calls() -> None:
    out = reply(MODEL, _user("one thing"), [SEARCH])
    assert out.content is None and len(out.tool_calls) == 1
    assert out.tool_calls[0].id.startswith("call_")


def test_subjects_come_from_lines_or_semicolons() -> None:
    assert parse_input("alpha; beta ;gamma").subjects == ("alpha", "beta", "gamma")
    assert parse_input("- alpha\n\n- beta\n  gamma  \n").subjects == ("alpha", "beta", "gamma")
    assert parse_input("  one whole   question?  ").subjects == ("one whole question?",)
    assert parse_input("x" * 500).subjects == ("x" * 200,)
    assert len(parse_input(";".join(f"s{i}" for i in range(1500))).subjects) == 1000


def test_plan_is_each_subject_times_each_tool_in_offered_order_one_call_per_turn() -> None:
    turns, answer, _ = _run(_user("rust; go"), [SEARCH, FETCH])
    assert [len(t) for t in turns] == [1, 1, 1, 1]
    calls = [t[0] for t in turns]
    assert [(c.name, _args(c)) for c in calls] == [
        ("search", {"query": "rust"}),
        ("fetch", {"url": "https://example.org/rust"}),
        ("search", {"query": "go"}),
        ("fetch", {"url": "https://example.org/go"}),
    ]
    assert len({c.id for c in calls}) == 4
    assert answer.tool_calls == ()


def test_parallel_emits_all_calls_of_the_next_subject_at_once() -> None:
    turns, _, _ = _run(_user("in parallel: rust; go; zig"), [SEARCH, FETCH])
    assert [[c.name for c in t] for t in turns] == [["search", "fetch"]] * 3
    assert [_args(t[0])["query"] for t in turns] == ["in parallel: rust", "go", "zig"]


def test_directives_come_first_and_are_not_subjects() -> None:
    text = "delegate to researcher: find papers on B-trees (budget 5000)\nask: which database do you use?\nindexes"
    assert parse_input(text).subjects == ("indexes",)
    turns, answer, _ = _run(_user(text), [SEARCH, SPAWN, ASK], result="postgres")
    calls = [c for t in turns for c in t]
    assert [(c.name, _args(c)) for c in calls] == [
        ("spawn_agent", {"agent": "researcher", "input": "find papers on B-trees", "tokens": 5000}),
        ("ask_human", {"question": "which database do you use?"}),
        ("search", {"query": "indexes"}),
    ]
    assert "The human answered: postgres" in (answer.content or "")
    assert "sub-agent researcher" in (answer.content or "")


def test_delegation_without_budget_omits_tokens_and_keeps_the_subtask_whole() -> None:
    out = reply(MODEL, _user("delegate to writer: a; b; c"), [SPAWN])
    assert [_args(c) for c in out.tool_calls] == [{"agent": "writer", "input": "a; b; c"}]


def test_directives_for_tools_not_offered_are_skipped() -> None:
    out = reply(MODEL, _user("ask: may I?\ntopic"), [SEARCH])
    assert [c.name for c in out.tool_calls] == ["search"]
    turns, answer, _ = _run(_user("ask: may I?\ntopic"), [SEARCH])
    assert "could not be acted on" in (answer.content or "")


def test_a_call_counts_as_done_only_when_its_result_matches_name_and_arguments() -> None:
    messages = _user("rust; go")
    first = reply(MODEL, messages, [SEARCH]).tool_calls[0]
    # A result for a different call (other arguments) does not satisfy the planned one.
    wrong = messages + [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_x", "type": "function", "function": {"name": "search", "arguments": '{"query": "java"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "call_x", "content": "java stuff"},
    ]
    assert reply(MODEL, wrong, [SEARCH]).tool_calls[0] == first
    # Re-serialised arguments (other spacing, key order) still match.
    reformatted = messages + [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "abc", "type": "function", "function": {"name": "search", "arguments": '{"query":"rust"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "abc", "content": "rust stuff"},
    ]
    assert _args(reply(MODEL, reformatted, [SEARCH]).tool_calls[0]) == {"query": "go"}


def test_final_answer_quotes_results_and_ends_with_a_conclusion() -> None:
    _, answer, _ = _run(_user("rust; go"), [SEARCH], result="Rust is a systems language")
    text = answer.content or ""
    assert 'Findings on rust: Rust is a systems language for {"query": "rust"}' in text
    assert "Findings on go:" in text
    assert text.splitlines()[-1].startswith("Conclusion: 2 subject(s) covered with 2 tool result(s)")


def test_final_answer_mentions_an_error_in_the_last_tool_result() -> None:
    messages = _user("rust")
    out = reply(MODEL, messages, [SEARCH])
    messages = messages + [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": out.tool_calls[0].id,
                    "type": "function",
                    "function": {"name": "search", "arguments": out.tool_calls[0].arguments},
                }
            ],
        },
        {"role": "tool", "tool_call_id": out.tool_calls[0].id, "content": "Error: search backend unreachable"},
    ]
    answer = reply(MODEL, messages, [SEARCH])
    assert "A tool reported an error: Error: search backend unreachable" in (answer.content or "")


def test_answer_without_tools_is_text_about_the_input() -> None:
    out = reply(MODEL, _user("explain B-tree page splits"), None)
    assert out.tool_calls == ()
    assert "explain B-tree page splits" in (out.content or "")
    assert reply(MODEL, _user("explain B-tree page splits"), []) == out


def test_answer_length_stays_bounded() -> None:
    short = reply(MODEL, _user("hi"), None).content or ""
    many = reply(MODEL, _user(";".join(f"subject number {i} about things" for i in range(1000))), None).content or ""
    assert 150 <= len(short) <= len(many) <= 1000
    assert "more subjects handled the same way" in many


def test_a_length_line_asks_for_a_long_answer_and_is_not_a_subject() -> None:
    long = reply(MODEL, _user("kv caches; paging\nlength: 2000 tokens"), None).content or ""
    assert 7000 <= len(long) <= 9000  # about 4 characters a token
    assert "length" not in long.splitlines()[0] and "Report on 2 subjects." in long
    assert long == reply(MODEL, _user("kv caches; paging\nlength: 2000 tokens"), None).content


def test_arguments_are_filled_from_the_schema() -> None:
    schema = {
        "type": "object",
        "properties": {
            "query": {"type": "string"},
            "source_url": {"type": "string"},
            "path": {"type": "string"},
            "count": {"type": "integer", "minimum": 1, "maximum": 10},
            "year": {"type": "integer"},
            "ratio": {"type": "number"},
            "verbose": {"type": "boolean"},
            "mode": {"type": "string", "enum": ["fast", "slow"]},
            "tags": {"type": "array", "items": {"type": "string"}},
            "filters": {"type": "object", "properties": {"lang": {"type": "string"}}, "required": ["lang"]},
            "maybe": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
            "optional": {"type": "string"},
            "blob": {"type": "object"},
        },
        "required": [
            "query",
            "source_url",
            "path",
            "count",
            "year",
            "ratio",
            "verbose",
            "mode",
            "tags",
            "filters",
            "maybe",
            "blob",
        ],
    }
    assert fill_arguments(schema, "Papers from 2019 on caching") == {
        "query": "Papers from 2019 on caching",
        "source_url": "https://example.org/papers-from-2019-on-caching",
        "path": "papers-from-2019-on-caching.txt",
        "count": 10,
        "year": 2019,
        "ratio": 2019.0,
        "verbose": True,
        "mode": "fast",
        "tags": ["Papers from 2019 on caching"],
        "filters": {"lang": "Papers from 2019 on caching"},
        "maybe": 2019,
        "blob": {},
    }
    # Without a number in the subject, numbers are its length; without `required`, all properties are filled.
    assert fill_arguments({"properties": {"n": {"type": "integer"}, "s": {"type": "string"}}}, "abcd") == {
        "n": 4,
        "s": "abcd",
    }
    assert fill_arguments({"type": "object"}, "x") == {}
    assert fill_arguments(None, "x") == {}


def test_content_parts_and_later_user_messages() -> None:
    parts = [{"role": "user", "content": [{"type": "text", "text": "rust; go"}]}]
    assert _args(reply(MODEL, parts, [SEARCH]).tool_calls[0]) == {"query": "rust"}
    # The task input is the FIRST user message; a later one does not change the plan.
    later = _user("rust; go") + [{"role": "user", "content": "hurry up"}]
    assert reply(MODEL, later, [SEARCH]) == reply(MODEL, _user("rust; go"), [SEARCH])


def test_a_remembered_plan_gives_the_replies_a_fresh_plan_gives():
    from orchestrator.engines.simulated import policy

    tools = [
        {
            "type": "function",
            "function": {
                "name": "lookup",
                "parameters": {
                    "type": "object",
                    "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
                    "required": ["query"],
                },
            },
        }
    ]
    messages = [{"role": "user", "content": "a; b; c"}]
    for _ in range(4):
        fresh_task = policy.parse_input("a; b; c")
        fresh = policy._plan(fresh_task, policy._offered(tools))
        task, _, remembered = policy._planned("a; b; c", tools)
        assert task == fresh_task
        assert [(s.group, s.name, s.args, s.key, s.canonical, s.results) for s in remembered] == [
            (s.group, s.name, s.args, s.key, s.canonical, s.results) for s in fresh
        ]
        answer = reply("m", messages, tools)
        assert answer == policy.Reply(**vars(_uncached_reply(policy, messages, tools)))
        if not answer.tool_calls:
            break
        call = answer.tool_calls[0]
        messages = messages + [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
                ],
            },
            {"role": "tool", "tool_call_id": call.id, "content": f"result {len(messages)}"},
        ]
    # Tools that JSON would blur (a tuple where a list was meant) are planned without the cache.
    blurred = [
        {
            "type": "function",
            "function": {
                "name": "lookup",
                "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ("query",)},
            },
        }
    ]
    plain = json.loads(json.dumps(blurred))
    assert reply("m", [{"role": "user", "content": "a"}], blurred) == _uncached_reply(
        policy, [{"role": "user", "content": "a"}], blurred
    )
    assert reply("m", [{"role": "user", "content": "a"}], plain) == _uncached_reply(
        policy, [{"role": "user", "content": "a"}], plain
    )


def _uncached_reply(policy, messages, tools):
    """reply() as it was before plans were remembered: plan afresh on every call."""
    task = policy.parse_input(policy._first_user_text(messages))
    offered = policy._offered(tools)
    steps = policy._plan(task, offered)
    results, last_tool_text = policy._results(messages)
    pending = policy._attach_results(steps, results)
    if pending:
        batch = [s for s in pending if s.group == pending[0].group] if task.parallel else pending[:1]
        return policy.Reply(tool_calls=tuple(policy._call(steps.index(s), s) for s in batch))
    return policy.Reply(content=policy._answer("m", task, steps, offered, last_tool_text))
