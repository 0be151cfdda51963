"""A synthetic agent workload: sessions of growing-context LLM calls, tool pauses, sub-agents, bursts.

The shape is what makes placement hard for agents rather than chat: many calls per task, each prompt
carrying the whole conversation so far, pauses for tools and users in between (a warm replica idles
while its session thinks), sub-agents that fan out, and bursts when a batch of tasks starts at once.
Every draw comes from `random.Random(seed)`, so a seed names one workload that every policy replays.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from orchestrator.simulator.json_input import field_errors, read_json
from orchestrator.simulator.plan import CallPlan, SessionPlan, Workload

# Every lognormal here has sigma 1: 95% of draws lie within e^±1.96 (about x/÷7) of the median, so
# outputs of median 150 tokens run from about 20 to 1,000 and answers (median 600) up to the 4,096 cap.
_SIGMA = 1.0
_ANSWER_OUTPUT_FACTOR = 4  # a turn's last call writes the answer, longer than a tool-calling step
_MIN_OUTPUT_TOKENS = 10
DEFAULT_MODELS = ("llama-3.1-8b", "qwen2.5-7b", "llama-3.2-1b", "llama-3.1-70b")


class ModelShare(BaseModel):
    """One model's share of sessions: weights are relative, they need not sum to 1."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    weight: float = Field(gt=0)


def zipf_shares(names: Sequence[str], s: float = 1.1) -> list[ModelShare]:
    """Shares with weight 1/rank**s: a few models take most traffic, a long tail stays cold."""
    return [ModelShare(name=name, weight=1.0 / rank**s) for rank, name in enumerate(names, start=1)]


class WorkloadSpec(BaseModel):
    """Agent traffic as a handful of distributions; `generate` turns it and a seed into sessions."""

    model_config = ConfigDict(extra="forbid")

    duration_s: float = Field(default=4 * 3600.0, gt=0, description="sessions arrive in [0, duration_s)")
    sessions_per_hour: float = Field(default=60.0, ge=0, description="base Poisson arrival rate")
    diurnal_amplitude: float = Field(default=0.0, ge=0, le=1, description="rate x (1 + a sin(2πt/period))")
    diurnal_period_s: float = Field(default=86400.0, gt=0)
    burst_every_s: float = Field(default=0.0, ge=0, description="mean gap between bursts; 0 = no bursts")
    burst_sessions: int = Field(default=20, ge=1, description="sessions per burst")
    burst_spread_s: float = Field(default=30.0, ge=0, description="a burst's sessions arrive within this")
    turns_per_session_max: int = Field(default=5, ge=1, description="turns are uniform in 1..max")
    turns_per_session_mean: float | None = Field(
        default=None, ge=1, le=1000, description="1 + Poisson(mean - 1) turns instead; None: uniform in 1..max"
    )
    calls_per_turn_mean: float = Field(default=8.0, ge=1, le=1000, description="1 + Poisson(mean - 1)")
    tool_s_median: float = Field(default=2.0, ge=0, description="tool time after a tool-calling call")
    think_s_median: float = Field(default=20.0, ge=0, description="user pause after a turn's answer")
    system_prompt_tokens: int = Field(default=2000, ge=0)
    user_message_tokens: int = Field(default=200, ge=0)
    tool_result_tokens_median: float = Field(default=500.0, ge=0)
    output_tokens_median: float = Field(default=150.0, gt=0, description="answers have 4x this median")
    output_tokens_max: int = Field(default=4096, ge=_MIN_OUTPUT_TOKENS)
    context_limit_tokens: int = Field(default=128_000, gt=0, description="prompts are clipped to it")
    models: list[ModelShare] = Field(default_factory=lambda: zipf_shares(DEFAULT_MODELS), min_length=1)
    subagent_probability: float = Field(default=0.05, ge=0, le=1, description="per tool-calling call")
    subagent_calls_mean: float = Field(default=6.0, ge=1, le=1000)
    batch_share: float = Field(
        default=0.0, ge=0, le=1, description="share of sessions submitted as batch (they and their sub-agents)"
    )
    spot_preemptions_per_node_hour: float = Field(default=0.0, ge=0)
    preemption_notice_s: float = Field(default=30.0, ge=0, description="0 = no notice")
    engine_stalls_per_node_hour: float = Field(
        default=0.0, ge=0, description="a node's engines go quiet while the node stays alive (any node)"
    )
    engine_stall_s: float = Field(default=30.0, gt=0, description="how long a stall lasts")

    @field_validator("models")
    @classmethod
    def _names_unique(cls, models: list[ModelShare]) -> list[ModelShare]:
        names = [m.name for m in models]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"model named more than once: {', '.join(duplicates)}")
        return models


def load_workload_spec(path: Path) -> WorkloadSpec:
    """Reads a spec from JSON; every error names the field (`workload.models.0.weight: ...`)."""
    data = read_json(path, "workload")
    if not isinstance(data, dict):
        raise ValueError(f"workload: {path} must hold a JSON object")
    try:
        return WorkloadSpec.model_validate(data)
    except ValidationError as e:
        raise field_errors("workload", e) from None


def generate(spec: WorkloadSpec, seed: int, spot_nodes: Sequence[str] = (), nodes: Sequence[str] = ()) -> Workload:
    """One workload per (spec, seed): the same sessions, preemptions (of `spot_nodes`) and engine stalls (of
    `nodes`) for every policy compared."""
    root = random.Random(seed)
    # Separate streams, so that changing one knob (say the model shares) leaves the arrival times and
    # the preemptions where they were, and two runs differ only in what was changed.
    arrivals_rng, sessions_rng, preemptions_rng, classes_rng = (random.Random(root.getrandbits(64)) for _ in range(4))
    arrivals = _arrival_times(spec, arrivals_rng)
    sessions = tuple(_session(spec, sessions_rng, f"s-{i:06d}", t) for i, t in enumerate(arrivals))
    sessions = tuple(_as_batch(s) if classes_rng.random() < spec.batch_share else s for s in sessions)
    preemptions = preemption_schedule(
        spot_nodes, spec.spot_preemptions_per_node_hour, spec.preemption_notice_s, spec.duration_s, preemptions_rng
    )
    # Drawn after the other streams, from a stream of its own: a workload without stalls is what it always was.
    stalls_rng = random.Random(root.getrandbits(64))
    stalls = {
        node: times
        for node, times in preemption_schedule(
            nodes, spec.engine_stalls_per_node_hour, spec.engine_stall_s, spec.duration_s, stalls_rng
        ).items()
        if times
    }
    return Workload(sessions=sessions, duration_s=spec.duration_s, preemptions=preemptions, stalls=stalls)


def preemption_schedule(
    spot_nodes: Sequence[str], per_node_hour: float, notice_s: float, duration_s: float, rng: random.Random
) -> dict[str, tuple[tuple[float, float], ...]]:
    """Poisson preemption times in [0, duration_s) per spot node, each with `notice_s` of warning (engine stalls
    are drawn the same way, each lasting `notice_s`).

    Nodes are visited in sorted order so the schedule depends on the set of nodes, not on how a
    caller listed them. Every spot node gets an entry, empty when it is never preempted.
    """
    if per_node_hour < 0 or notice_s < 0:
        raise ValueError(f"preemptions: rate {per_node_hour} and notice {notice_s} must not be negative")
    schedule: dict[str, tuple[tuple[float, float], ...]] = {}
    for node in sorted(set(spot_nodes)):
        times: list[tuple[float, float]] = []
        if per_node_hour > 0:
            t = rng.expovariate(per_node_hour / 3600.0)
            while t < duration_s:
                times.append((t, notice_s))
                t += rng.expovariate(per_node_hour / 3600.0)
        schedule[node] = tuple(times)
    return schedule


def _arrival_times(spec: WorkloadSpec, rng: random.Random) -> list[float]:
    """Diurnal Poisson arrivals (by thinning at the peak rate) plus bursts, sorted."""
    times: list[float] = []
    peak_per_s = spec.sessions_per_hour * (1.0 + spec.diurnal_amplitude) / 3600.0
    if peak_per_s > 0:
        t = rng.expovariate(peak_per_s)
        while t < spec.duration_s:
            relative = 1.0 + spec.diurnal_amplitude * math.sin(2 * math.pi * t / spec.diurnal_period_s)
            if rng.random() * (1.0 + spec.diurnal_amplitude) < relative:
                times.append(t)
            t += rng.expovariate(peak_per_s)
    if spec.burst_every_s > 0:
        start = rng.expovariate(1.0 / spec.burst_every_s)
        while start < spec.duration_s:
            burst = (start + rng.uniform(0.0, spec.burst_spread_s) for _ in range(spec.burst_sessions))
            times.extend(t for t in burst if t < spec.duration_s)
            start += rng.expovariate(1.0 / spec.burst_every_s)
    return sorted(times)


def _session(spec: WorkloadSpec, rng: random.Random, session_id: str, arrival_s: float) -> SessionPlan:
    model = rng.choices([m.name for m in spec.models], weights=[m.weight for m in spec.models])[0]
    count = (
        rng.randint(1, spec.turns_per_session_max)
        if spec.turns_per_session_mean is None
        else _one_plus_poisson(spec.turns_per_session_mean, rng)
    )
    turns = [_one_plus_poisson(spec.calls_per_turn_mean, rng) for _ in range(count)]
    return SessionPlan(
        session_id=session_id, arrival_s=arrival_s, calls=_calls(spec, rng, model, turns, session_id, may_spawn=True)
    )


def _calls(
    spec: WorkloadSpec, rng: random.Random, model: str, turns: list[int], session_id: str, may_spawn: bool
) -> tuple[CallPlan, ...]:
    """The calls of a conversation of `turns` (calls per turn), each prompt carrying all before it.

    Within a turn every call but the last asks for tools: tool time follows it and the tool result
    joins the next prompt. The last call answers; the user thinks, then their next message joins the
    prompt. Nothing follows the conversation's final answer. Sub-agents are tool calls, so only
    tool-calling calls spawn them; a sub-agent never spawns (depth 1).
    """
    calls: list[CallPlan] = []
    prompt = min(spec.system_prompt_tokens + spec.user_message_tokens, spec.context_limit_tokens)
    for turn, size in enumerate(turns):
        for index in range(size):
            answer = index == size - 1
            output = _output_tokens(spec, rng, answer)
            spawn = None
            if answer:
                pause = 0.0 if turn == len(turns) - 1 else _lognormal(rng, spec.think_s_median)
                added = spec.user_message_tokens
            else:
                pause = _lognormal(rng, spec.tool_s_median)
                added = round(_lognormal(rng, spec.tool_result_tokens_median))
                if may_spawn and rng.random() < spec.subagent_probability:
                    spawn = _subagent(spec, rng, model, f"{session_id}/sub-{len(calls)}")
            calls.append(
                CallPlan(
                    model=model, prompt_tokens=prompt, output_tokens=output, tool_s=pause, spawn=spawn, ends_turn=answer
                )
            )
            prompt = min(prompt + output + added, spec.context_limit_tokens)
    return tuple(calls)


def _as_batch(session: SessionPlan) -> SessionPlan:
    """The session submitted as batch: it, and every sub-agent it starts (they inherit their parent's class)."""
    calls = tuple(replace(c, spawn=_as_batch(c.spawn)) if c.spawn is not None else c for c in session.calls)
    return replace(session, calls=calls, priority="batch")


def _subagent(spec: WorkloadSpec, rng: random.Random, model: str, session_id: str) -> SessionPlan:
    """A one-turn task on its parent's model, with a fresh context (system prompt and the task).

    arrival_s is 0: a sub-agent has no arrival of its own; it starts when its parent's call ends.
    """
    turns = [_one_plus_poisson(spec.subagent_calls_mean, rng)]
    return SessionPlan(
        session_id=session_id, arrival_s=0.0, calls=_calls(spec, rng, model, turns, session_id, may_spawn=False)
    )


def _one_plus_poisson(mean: float, rng: random.Random) -> int:
    """1 + Poisson(mean - 1): a session has at least one turn and a turn at least one call, `mean` on average."""
    count, t = 1, rng.expovariate(1.0)
    while t < mean - 1:  # counting unit-rate events in [0, mean - 1) never underflows, unlike exp(-mean)
        count += 1
        t += rng.expovariate(1.0)
    return count


def _output_tokens(spec: WorkloadSpec, rng: random.Random, answer: bool) -> int:
    median = spec.output_tokens_median * (_ANSWER_OUTPUT_FACTOR if answer else 1)
    return min(max(round(_lognormal(rng, median)), _MIN_OUTPUT_TOKENS), spec.output_tokens_max)


def _lognormal(rng: random.Random, median: float) -> float:
    return median * math.exp(_SIGMA * rng.gauss(0.0, 1.0))
