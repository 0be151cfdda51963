"""What a simulated workload is: sessions (agent tasks) of LLM calls, tool pauses and sub-agents.

Plain frozen data, made by the generator (workload.py) or read from a CSV trace, and read by the
simulation (engine.py); seconds are virtual seconds from the start of the run.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sdk.wire.recovery import DEFAULT_RECOVERY, RecoveryRule

from ..pool.decision import Priority


@dataclass(frozen=True)
class CallPlan:
    """One LLM call of a session, then what the agent does before its next call."""

    model: str
    prompt_tokens: int  # the whole prompt sent: it grows with the conversation
    output_tokens: int
    tool_s: float = 0.0  # the tool calls after this answer, before the next call
    # A sub-agent started after this answer; the session waits for it (it is a tool call that runs a task).
    spawn: SessionPlan | None = None
    not_before_s: float = 0.0  # a trace's own timestamp: the call is not issued before it
    ends_turn: bool = False  # it answers the user, who takes `tool_s` to reply (the task awaits input)


@dataclass(frozen=True)
class SessionPlan:
    """One agent task: its calls run one after another (a call waits for the previous one and its tools)."""

    session_id: str
    arrival_s: float
    calls: tuple[CallPlan, ...]
    tenant: str = "default"
    priority: Priority = "interactive"
    recovery: tuple[RecoveryRule, ...] = DEFAULT_RECOVERY  # as a task's spec names them (TaskSpec.recovery)

    def __post_init__(self) -> None:
        if not self.calls:
            raise ValueError(f"session {self.session_id!r} has no calls")


@dataclass(frozen=True)
class Workload:
    sessions: tuple[SessionPlan, ...]
    duration_s: float  # the horizon: arrivals happen before it; the run goes on until every session ends
    # Spot preemptions: (virtual time, notice seconds) per spot node name, the same for every policy.
    preemptions: dict[str, tuple[tuple[float, float], ...]] = field(default_factory=dict)
    # Engine stalls: (virtual time, seconds its engines stay quiet) per node name; the node itself stays alive.
    stalls: dict[str, tuple[tuple[float, float], ...]] = field(default_factory=dict)

    @property
    def models(self) -> list[str]:
        seen: dict[str, None] = {}

        def visit(session: SessionPlan) -> None:
            for call in session.calls:
                seen.setdefault(call.model, None)
                if call.spawn is not None:
                    visit(call.spawn)

        for s in self.sessions:
            visit(s)
        return list(seen)
