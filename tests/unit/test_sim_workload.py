"""The simulator's workloads: the generator's shape and determinism, and the CSV trace reader's errors."""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.simulator.plan import CallPlan, SessionPlan, Workload
from orchestrator.simulator.trace import read_trace
from orchestrator.simulator.workload import (
    ModelShare,
    WorkloadSpec,
    generate,
    load_workload_spec,
    preemption_schedule,
    zipf_shares,
)


def all_sessions(workload: Workload) -> Iterator[SessionPlan]:
    for session in workload.sessions:
        yield session
        yield from (call.spawn for call in session.calls if call.spawn is not None)


def all_calls(workload: Workload) -> Iterator[CallPlan]:
    for session in all_sessions(workload):
        yield from session.calls


def test_a_seed_names_one_workload() -> None:
    spec = WorkloadSpec(
        duration_s=3600, burst_every_s=900, subagent_probability=0.2, spot_preemptions_per_node_hour=1.0
    )
    first = generate(spec, seed=7, spot_nodes=["n1", "n2"])
    assert first == generate(spec, seed=7, spot_nodes=["n2", "n1"])
    assert first != generate(spec, seed=8, spot_nodes=["n1", "n2"])
    assert first.sessions and first.duration_s == 3600


def test_prompts_grow_within_a_session_and_stay_within_the_context_limit() -> None:
    spec = WorkloadSpec(duration_s=3600, context_limit_tokens=20_000, subagent_probability=0.2)
    workload = generate(spec, seed=1)
    for session in all_sessions(workload):
        prompts = [call.prompt_tokens for call in session.calls]
        assert prompts == sorted(prompts)
        assert max(prompts) <= spec.context_limit_tokens
        assert prompts[0] == spec.system_prompt_tokens + spec.user_message_tokens
    assert any(call.prompt_tokens == spec.context_limit_tokens for call in all_calls(workload))


def test_outputs_are_clipped_to_ten_and_the_maximum() -> None:
    spec = WorkloadSpec(duration_s=3600, output_tokens_median=40, output_tokens_max=300)
    outputs = [call.output_tokens for call in all_calls(generate(spec, seed=2))]
    assert min(outputs) == 10 and max(outputs) == 300


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32), duration_s=st.floats(1, 1800), burst_every_s=st.sampled_from([0.0, 60.0]))
def test_sessions_arrive_in_order_within_the_horizon(seed: int, duration_s: float, burst_every_s: float) -> None:
    spec = WorkloadSpec(
        duration_s=duration_s,
        sessions_per_hour=600,
        burst_every_s=burst_every_s,
        burst_spread_s=120,
        turns_per_session_max=1,
        calls_per_turn_mean=1,
    )
    sessions = generate(spec, seed=seed).sessions
    arrivals = [s.arrival_s for s in sessions]
    assert arrivals == sorted(arrivals)
    assert all(0 <= t < duration_s for t in arrivals)
    assert [s.session_id for s in sessions] == [f"s-{i:06d}" for i in range(len(sessions))]


def busiest_minute(workload: Workload) -> int:
    arrivals = [s.arrival_s for s in workload.sessions]
    return max(sum(1 for t in arrivals if start <= t < start + 60) for start in arrivals)


def test_bursts_make_arrivals_clumpy() -> None:
    light = dict(duration_s=4 * 3600, turns_per_session_max=1, calls_per_turn_mean=1)
    steady = generate(WorkloadSpec(sessions_per_hour=120, **light), seed=3)
    bursty = generate(
        WorkloadSpec(sessions_per_hour=60, burst_every_s=1800, burst_sessions=30, burst_spread_s=30, **light), seed=3
    )
    assert 0.5 < len(bursty.sessions) / len(steady.sessions) < 1.5  # about the same traffic in all
    assert busiest_minute(bursty) >= 3 * busiest_minute(steady)


def test_diurnal_amplitude_moves_traffic_to_the_day() -> None:
    spec = WorkloadSpec(
        duration_s=7200,
        diurnal_period_s=7200,
        diurnal_amplitude=1.0,
        sessions_per_hour=1000,
        turns_per_session_max=1,
        calls_per_turn_mean=1,
    )
    arrivals = [s.arrival_s for s in generate(spec, seed=4).sessions]
    day = sum(1 for t in arrivals if t < 3600)
    assert day > 0.75 * len(arrivals)  # sin > 0 in the first half: 1/2 + 1/π ≈ 82% of arrivals


def test_models_are_picked_by_their_weights() -> None:
    spec = WorkloadSpec(
        duration_s=3600,
        sessions_per_hour=4000,
        turns_per_session_max=1,
        calls_per_turn_mean=1,
        models=[ModelShare(name="big", weight=3), ModelShare(name="small", weight=1)],
    )
    workload = generate(spec, seed=5)
    counts = Counter(s.calls[0].model for s in workload.sessions)
    assert abs(counts["big"] / len(workload.sessions) - 0.75) < 0.03
    assert all(len({c.model for c in s.calls}) == 1 for s in workload.sessions)


def test_zipf_shares_fall_with_rank() -> None:
    shares = zipf_shares(["a", "b", "c"], s=1.0)
    assert [(m.name, m.weight) for m in shares] == [("a", 1.0), ("b", 0.5), ("c", pytest.approx(1 / 3))]
    assert [m.name for m in WorkloadSpec().models][0] == "llama-3.1-8b"


def test_subagents_spawn_at_the_configured_rate_and_never_nest() -> None:
    # With no think time only tool-calling calls have tool_s > 0, and those are where sub-agents spawn.
    spec = WorkloadSpec(duration_s=3600, think_s_median=0, subagent_probability=0.2, subagent_calls_mean=4)
    workload = generate(spec, seed=6)
    tool_calls = [c for s in workload.sessions for c in s.calls if c.tool_s > 0]
    spawns = [c.spawn for c in tool_calls if c.spawn is not None]
    assert all(c.spawn is None for s in workload.sessions for c in s.calls if c.tool_s == 0)
    assert abs(len(spawns) / len(tool_calls) - 0.2) < 0.03
    assert all(c.spawn is None for sub in spawns for c in sub.calls)
    assert all(sub.arrival_s == 0.0 and re.fullmatch(r"s-\d{6}/sub-\d+", sub.session_id) for sub in spawns)
    assert 3.5 < sum(len(sub.calls) for sub in spawns) / len(spawns) < 4.5


def test_a_batch_share_marks_whole_sessions_and_changes_nothing_else() -> None:
    spec = WorkloadSpec(duration_s=3 * 3600, sessions_per_hour=200, subagent_probability=0.2)
    interactive = generate(spec, seed=4)
    mixed = generate(spec.model_copy(update={"batch_share": 0.3}), seed=4)
    assert {s.priority for s in all_sessions(interactive)} == {"interactive"}
    batch = [s for s in mixed.sessions if s.priority == "batch"]
    assert abs(len(batch) / len(mixed.sessions) - 0.3) < 0.05
    # A batch session's sub-agents are batch too; the traffic itself is the same draw.
    assert all(c.spawn.priority == s.priority for s in mixed.sessions for c in s.calls if c.spawn is not None)
    assert [(s.session_id, s.arrival_s, len(s.calls)) for s in mixed.sessions] == [
        (s.session_id, s.arrival_s, len(s.calls)) for s in interactive.sessions
    ]
    assert [(c.model, c.prompt_tokens, c.output_tokens) for c in all_calls(mixed)] == [
        (c.model, c.prompt_tokens, c.output_tokens) for c in all_calls(interactive)
    ]


def test_preemption_schedule_is_deterministic_and_poisson() -> None:
    nodes = [f"spot-{i}" for i in range(10)]
    schedule = preemption_schedule(nodes, 0.5, 30.0, 100 * 3600, random.Random(9))
    assert schedule == preemption_schedule(list(reversed(nodes)), 0.5, 30.0, 100 * 3600, random.Random(9))
    assert list(schedule) == sorted(nodes)
    events = [e for times in schedule.values() for e in times]
    assert 400 < len(events) < 600  # 10 nodes x 100 h x 0.5 / h = 500 expected
    assert all(0 <= t < 100 * 3600 and notice == 30.0 for t, notice in events)
    assert all([t for t, _ in times] == sorted(t for t, _ in times) for times in schedule.values())
    assert preemption_schedule(nodes, 0.0, 30.0, 3600, random.Random(9)) == {n: () for n in nodes}
    with pytest.raises(ValueError, match="negative"):
        preemption_schedule(nodes, -1.0, 30.0, 3600, random.Random(9))


@pytest.mark.parametrize(
    ("content", "field"),
    [
        ({"diurnal_amplitude": 2}, "workload.diurnal_amplitude: "),
        ({"models": [{"name": "a", "weight": 0}]}, "workload.models.0.weight: "),
        ({"models": []}, "workload.models: "),
        ({"models": [{"name": "a", "weight": 1}, {"name": "a", "weight": 2}]}, "workload.models: "),
        ({"sessions_per_hr": 10}, "workload.sessions_per_hr: "),
        ({"output_tokens_max": "many"}, "workload.output_tokens_max: "),
        ([1, 2], "workload: "),
    ],
)
def test_spec_errors_name_the_field(tmp_path: Path, content: object, field: str) -> None:
    path = tmp_path / "workload.json"
    path.write_text(json.dumps(content))
    with pytest.raises(ValueError) as raised:
        load_workload_spec(path)
    assert str(raised.value).startswith(field)


def test_spec_file_is_read(tmp_path: Path) -> None:
    path = tmp_path / "workload.json"
    path.write_text(json.dumps({"sessions_per_hour": 10, "models": [{"name": "m", "weight": 1}]}))
    assert load_workload_spec(path) == WorkloadSpec(sessions_per_hour=10, models=[ModelShare(name="m", weight=1)])
    path.write_text("{")
    with pytest.raises(ValueError, match=r"^workload: .* is not JSON: line 1"):
        load_workload_spec(path)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "trace.csv"
    path.write_text(text)
    return path


def test_a_trace_is_read_exactly(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "session_id,extra,model,timestamp,output_tokens,prompt_tokens\n"
        "b,x,m2,105.5,20,1000\n"
        "a,x,m1,100,10,500\n"
        "a,x,m1,102,30,900\n"
        "b,x,m2,103,5,800\n"
        "\n",
    )
    workload = read_trace(path)
    assert workload == Workload(
        sessions=(
            SessionPlan(
                session_id="a",
                arrival_s=0.0,
                calls=(
                    CallPlan(model="m1", prompt_tokens=500, output_tokens=10, not_before_s=0.0),
                    CallPlan(model="m1", prompt_tokens=900, output_tokens=30, not_before_s=2.0),
                ),
            ),
            SessionPlan(
                session_id="b",
                arrival_s=3.0,
                calls=(
                    CallPlan(model="m2", prompt_tokens=800, output_tokens=5, not_before_s=3.0),
                    CallPlan(model="m2", prompt_tokens=1000, output_tokens=20, not_before_s=5.5),
                ),
            ),
        ),
        duration_s=6.5,
    )


def test_a_trace_takes_iso_timestamps_and_preemptions(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "timestamp,model,prompt_tokens,output_tokens,session_id\n"
        "2026-01-01T10:00:00Z,m,1,1,s\n"
        "2026-01-01T11:00:30+01:00,m,1,1,s\n",
    )
    workload = read_trace(path, spot_nodes=["n"], preemptions_per_node_hour=100, preemption_notice_s=5, seed=1)
    assert [c.not_before_s for c in workload.sessions[0].calls] == [0.0, 30.0]
    assert workload.duration_s == 31.0
    assert workload.preemptions["n"] and all(notice == 5 for _, notice in workload.preemptions["n"])
    assert workload == read_trace(path, spot_nodes=["n"], preemptions_per_node_hour=100, preemption_notice_s=5, seed=1)


HEADER = "timestamp,model,prompt_tokens,output_tokens,session_id\n"
GOOD = "1,m,10,10,s\n"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("timestamp,model,prompt_tokens,session_id\n" + GOOD, "row 1: column 'output_tokens': missing"),
        (HEADER + GOOD + "2,m,ten,10,s\n", "row 3: column 'prompt_tokens': not a whole number"),
        (HEADER + GOOD + "2,m,10,-1,s\n", "row 3: column 'output_tokens': negative"),
        (HEADER + GOOD + "2,m,10,1.5,s\n", "row 3: column 'output_tokens': not a whole number"),
        (HEADER + "yesterday,m,10,10,s\n", "row 2: column 'timestamp': neither seconds nor an ISO 8601"),
        (HEADER + "2026-01-01T10:00:00,m,10,10,s\n", "row 2: column 'timestamp': an ISO 8601 time needs a timezone"),
        (HEADER + "nan,m,10,10,s\n", "row 2: column 'timestamp': not a finite"),
        (HEADER + GOOD + GOOD + "3, ,10,10,s\n", "row 4: column 'model': empty"),
        (HEADER + "1,m,10,10\n", "row 2: column 'session_id': empty"),
        ("", "empty file"),
        (HEADER, "empty file"),
    ],
)
def test_bad_traces_name_the_row_and_column(tmp_path: Path, text: str, expected: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ValueError) as raised:
        read_trace(path)
    assert str(raised.value).startswith(f"{path}: ")
    assert expected in str(raised.value)
