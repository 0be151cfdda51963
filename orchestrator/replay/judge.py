"""Replay histories on this build's workflow code, and say where the first one that does not replay parts.

The judge is Temporal's own Replayer with what the orchestrator worker registers: the same workflow classes,
the pydantic data converter and the tracing interceptor, so a verdict here is the verdict a restarted worker
would reach.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.runtime import Runtime, TelemetryConfig
from temporalio.worker import Replayer

from workflows.agent_task import AgentTaskWorkflow
from workflows.fleet_ops import PrewarmWorkflow, ReplicaLoadWorkflow, ReplicaUnloadWorkflow

from ..telemetry.tracing import tracing_interceptor

# Exactly what orchestrator.worker registers: a history replays there only if it replays here.
WORKER_WORKFLOWS: Sequence[type] = (AgentTaskWorkflow, ReplicaLoadWorkflow, ReplicaUnloadWorkflow, PrewarmWorkflow)
# Core's message for a nondeterminism error: "[TMPRL1100] Nondeterminism error: ..."
_CORE_MESSAGE = re.compile(r'message: "(?P<message>(?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class Mismatch:
    """Where a history parts from the code: its first event that the code does not reproduce."""

    event_id: int
    event_type: str
    error: str


@dataclass(frozen=True)
class Verdict:
    """One workflow run's replay: `mismatch` is None when it replays."""

    workflow_id: str
    run_id: str | None
    workflow_type: str
    events: int
    mismatch: Mismatch | None

    @property
    def replays(self) -> bool:
        return self.mismatch is None

    def describe(self) -> str:
        where = f"{self.workflow_id}" + (f" (run {self.run_id})" if self.run_id else "")
        if self.mismatch is None:
            return f"ok      {where}: {self.workflow_type}, {self.events} events replay"
        m = self.mismatch
        return (
            f"FAILS   {where}: {self.workflow_type}, first mismatching event #{m.event_id} {m.event_type}"
            f" of {self.events}: {m.error}"
        )


def replayer() -> Replayer:
    """A Replayer configured as the orchestrator worker is, on a runtime of its own whose Core logs nothing:
    Core would print a warning for every workflow task a failing history fails (the bisection replays several),
    and the verdicts already say what failed and where."""
    return Replayer(
        workflows=list(WORKER_WORKFLOWS),
        data_converter=pydantic_data_converter,
        interceptors=[tracing_interceptor()],
        runtime=_quiet_runtime(),
    )


@functools.cache
def _quiet_runtime() -> Runtime:
    return Runtime(telemetry=TelemetryConfig(logging=None, metrics=None))


async def judge(histories: Iterable[WorkflowHistory], judge_with: Replayer | None = None) -> list[Verdict]:
    """Each history's verdict, in the order given; a history that fails is replayed again on its prefixes to
    find the first event the code does not reproduce (what a person fixing it needs, not just that it fails)."""
    judging = judge_with or replayer()
    verdicts = []
    for history in histories:
        result = await judging.replay_workflow(history, raise_on_replay_failure=False)
        mismatch = None
        if result.replay_failure is not None:
            mismatch = await _first_mismatch(judging, history, _readable(result.replay_failure))
        verdicts.append(
            Verdict(
                workflow_id=history.workflow_id,
                run_id=_run_id(history),
                workflow_type=_workflow_type(history),
                events=len(history.events),
                mismatch=mismatch,
            )
        )
    return verdicts


async def _first_mismatch(judging: Replayer, history: WorkflowHistory, error: str) -> Mismatch:
    """Bisect on the history's length: a prefix ending before the first mismatching event replays, one that
    includes it does not (Core checks each event against the commands as it reaches it)."""
    events = list(history.events)
    good, bad = 1, len(events)  # the first event always replays; the whole history does not
    while bad - good > 1:
        middle = (good + bad) // 2
        prefix = WorkflowHistory(history.workflow_id, events[:middle])
        result = await judging.replay_workflow(prefix, raise_on_replay_failure=False)
        if result.replay_failure is None:
            good = middle
        else:
            bad, error = middle, _readable(result.replay_failure)
    event = events[bad - 1]
    return Mismatch(event_id=event.event_id, event_type=EventType.Name(event.event_type), error=error)


def _readable(failure: Exception) -> str:
    """Core's message, without the Rust debug dump around it."""
    text = str(failure)
    found = _CORE_MESSAGE.search(text)
    return json.loads(f'"{found.group("message")}"') if found else text


def _run_id(history: WorkflowHistory) -> str | None:
    first = history.events[0] if history.events else None
    if first is None or not first.HasField("workflow_execution_started_event_attributes"):
        return None
    return first.workflow_execution_started_event_attributes.original_execution_run_id or None


def _workflow_type(history: WorkflowHistory) -> str:
    first = history.events[0] if history.events else None
    if first is None or not first.HasField("workflow_execution_started_event_attributes"):
        return "?"
    return first.workflow_execution_started_event_attributes.workflow_type.name
