"""The agent-sessions scenario draws traffic with the published statistics of Copilot's coding-agent sessions."""

from __future__ import annotations

from collections import Counter

import pytest

from orchestrator.catalogue import SEED_MODELS
from orchestrator.simulator.agent_sessions import (
    AGENT_SESSIONS,
    COMPLETION_TOKENS,
    LLM_CALLS_PER_TURN,
    PROMPT_TO_COMPLETION,
    PROMPT_TOKENS,
    SESSIONS,
    TURNS_PER_SESSION,
)
from orchestrator.simulator.plan import Workload
from orchestrator.simulator.scenarios import scenario
from orchestrator.simulator.workload import generate


def measured(workload: Workload) -> dict[str, float]:
    """Turns per session, LLM calls per turn, prompt:completion and mean tokens per call, as the source counts them."""
    calls = [c for s in workload.sessions for c in s.calls]
    turns = sum(c.ends_turn for c in calls)
    prompt, completion = sum(c.prompt_tokens for c in calls), sum(c.output_tokens for c in calls)
    return {
        "turns_per_session": turns / len(workload.sessions),
        "calls_per_turn": len(calls) / turns,
        "prompt_to_completion": prompt / completion,
        "prompt_per_call": prompt / len(calls),
        "completion_per_call": completion / len(calls),
    }


def published() -> dict[str, float]:
    calls = SESSIONS * TURNS_PER_SESSION * LLM_CALLS_PER_TURN
    return {
        "turns_per_session": TURNS_PER_SESSION,
        "calls_per_turn": LLM_CALLS_PER_TURN,
        "prompt_to_completion": PROMPT_TO_COMPLETION,
        "prompt_per_call": PROMPT_TOKENS / calls,
        "completion_per_call": COMPLETION_TOKENS / calls,
    }


def test_the_scenario_as_the_benchmark_runs_it_matches_the_published_statistics() -> None:
    """Seed 0 of the 4-hour scenario: ~120 sessions, so a turn count off by a few percent is sampling."""
    workload = generate(scenario("agent-sessions"), seed=0)
    got, want = measured(workload), published()
    assert got["turns_per_session"] == pytest.approx(want["turns_per_session"], rel=0.10)
    assert got["calls_per_turn"] == pytest.approx(want["calls_per_turn"], rel=0.05)
    assert got["prompt_to_completion"] == pytest.approx(want["prompt_to_completion"], rel=0.10)


def test_the_knobs_give_the_published_statistics_over_a_long_draw() -> None:
    """40 hours (~1,000 sessions, ~31,000 calls): the knobs' own means, where sampling no longer hides a bad one."""
    workload = generate(AGENT_SESSIONS.model_copy(update={"duration_s": 40 * 3600.0}), seed=1)
    got, want = measured(workload), published()
    assert got == {name: pytest.approx(value, rel=0.03) for name, value in want.items()}


def test_prompts_grow_within_a_session_and_tools_pause_between_the_calls_of_a_turn() -> None:
    for session in generate(AGENT_SESSIONS, seed=0).sessions[:20]:
        prompts = [c.prompt_tokens for c in session.calls]
        assert prompts == sorted(prompts) and prompts[-1] <= AGENT_SESSIONS.context_limit_tokens
        assert all(c.tool_s > 0 for c in session.calls if not c.ends_turn)
        assert all(c.spawn is None for c in session.calls)  # sub-agents would add calls the source does not count


def test_models_are_the_catalogues_long_context_ones_the_largest_called_most() -> None:
    windows = {e.name: e.context_window for e in SEED_MODELS if e.provider == "self-hosted"}
    sessions = Counter(s.calls[0].model for s in generate(AGENT_SESSIONS, seed=0).sessions)
    assert set(sessions) <= set(windows)
    assert all(windows[m] - AGENT_SESSIONS.output_tokens_max >= AGENT_SESSIONS.context_limit_tokens for m in sessions)
    assert sessions.most_common(1)[0][0] == "llama-3.1-70b"
