"""The task page's timeline draws every phase as the task's typed events say it was (issue 35, part 4): the step
being generated now, waits for budget, for a GPU, for a tool worker and for a person, loads, a generation cut by a
lost node and the time until it was placed again; and its axis labels are distinct and exact at every scale."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from orchestrator.ui.timeline import MAX_TICKS, PHASE_WORDS, Timeline, axis_ticks, step_timeline, timeline_svg
from sdk import TaskEvent
from sdk.wire.task_events import TypedTaskEvent, parse_event

T0 = datetime(2026, 12, 6, 9, 0, tzinfo=UTC)


class Log:
    """A task's event log as the workflow and the books write it, at seconds from T0."""

    def __init__(self) -> None:
        self.events: list[TypedTaskEvent] = []

    def add(self, event: str, at_s: float, **data: Any) -> Log:
        raw = TaskEvent(seq=len(self.events) + 1, task_id="t", kind=event, at=T0 + timedelta(seconds=at_s), data=data)
        self.events.append(parse_event(raw))
        return self

    def state(self, at_s: float, status: str, waiting_for: str | None = None, step: int = 0) -> Log:
        return self.add("state", at_s, status=status, step=step, waiting_for=waiting_for)

    def call(self, at_s: float, step: int, duration: float, queue: float = 0.0, load: float = 0.0, **more: Any) -> Log:
        return self.add(
            "llm_call",
            at_s,
            step=step,
            node_id="gpu-a",
            duration_s=duration,
            ttft_s=0.5,
            queue_wait_s=queue,
            load_s=load,
            completion_tokens=100,
            **more,
        )

    def step(self, at_s: float, step: int) -> Log:
        return self.add("step", at_s, step=step)

    def cut(self, at_s: float, step: int, cut_at_s: float, kind: str, tokens_lost: int = 0, **more: Any) -> Log:
        """The `interruption` event of a cut on gpu-a at `cut_at_s`, written at `at_s` once it resumed on gpu-b."""
        return self.add(
            "interruption",
            at_s,
            step=step,
            node_id="gpu-a",
            kind=kind,
            at=_at(cut_at_s).isoformat(),
            tokens_kept=40,
            tokens_lost=tokens_lost,
            resumed_on="gpu-b",
            status="running",
            **more,
        )


def _phases(timeline: Timeline, step: int) -> list[tuple[str, float, float]]:
    [row] = [r for r in timeline.rows if r.step == step]
    return [
        (p.kind, round((p.start - T0).total_seconds(), 2), round((p.end - T0).total_seconds(), 2)) for p in row.phases
    ]


def _at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_the_step_being_generated_is_drawn_up_to_now_and_the_tools_end_where_it_began() -> None:
    log = Log().state(0, "running").call(10, 1, 4, queue=0.5, tool_calls=["search"]).step(15, 1)
    timeline = step_timeline(log.events, _at(0), _at(20), live=True)
    assert [r.step for r in timeline.rows] == [1, 2]
    assert _phases(timeline, 1)[-1] == ("tools", 10, 15)  # not to now: step 2 asked for its place at 15
    assert _phases(timeline, 2) == [("generating", 15, 20)]
    assert timeline.end == _at(20)
    svg = str(timeline_svg(timeline))
    assert 'data-phase="generating"' in svg and "step 2 · generating now: for 5.0 s so far" in svg

    first = step_timeline(Log().state(0, "running").events, _at(0), _at(3), live=True)
    assert _phases(first, 1) == [("generating", 0, 3)]  # a task's first step, before any call is booked
    ended = step_timeline(log.events, _at(0), _at(20), live=False)
    assert [r.step for r in ended.rows] == [1]  # a finished task has no step "now"


def test_a_wait_for_budget_is_drawn_as_one_and_not_as_tools() -> None:
    log = (
        Log()
        .state(0, "running")
        .call(10, 1, 4, tool_calls=["search"])
        .state(12, "awaiting_budget", "budget: 300 tokens short")
        .state(30, "running")
        .step(31, 1)
        .call(40, 2, 5, queue=0.2)
    )
    timeline = step_timeline(log.events, _at(0), _at(41))
    assert _phases(timeline, 1)[-3:] == [("tools", 10, 12), ("budget", 12, 30), ("tools", 30, 31)]
    assert _phases(timeline, 2)[0] == ("queue", 31, 35)  # from its first ask (the step event of step 1)
    tips = [p.tip for p in timeline.rows[0].phases]
    assert "step 1 · waiting for budget (budget: 300 tokens short): 18.0 s" in tips


def test_a_wait_for_a_gpu_inside_the_queue_wait_is_drawn_as_one() -> None:
    log = (
        Log()
        .state(30, "running")
        .state(31, "waiting_for_gpu", "gpu: no free GPU (place 1 in the queue for m)")
        .state(88, "running")
        .call(100, 1, 10, queue=60)
    )
    timeline = step_timeline(log.events, _at(0), _at(100))
    assert _phases(timeline, 1) == [
        ("queue", 30, 31),
        ("gpu", 31, 88),
        ("queue", 88, 90),
        ("ttft", 90, 90.5),
        ("generation", 90.5, 100),
    ]


def test_a_live_task_waiting_for_a_gpu_after_its_tools_is_not_drawn_as_tools() -> None:
    log = (
        Log()
        .state(0, "running")
        .call(10, 1, 4, tool_calls=["search"])
        .step(12, 1)
        .state(12.5, "waiting_for_gpu", "gpu: no free GPU")
    )
    timeline = step_timeline(log.events, _at(0), _at(60), live=True)
    assert _phases(timeline, 1)[-1] == ("tools", 10, 12)
    assert _phases(timeline, 2) == [("queue", 12, 12.5), ("gpu", 12.5, 60)]


def test_a_generation_cut_by_a_lost_node_is_drawn_as_cut_then_placed_again_not_as_queue_wait() -> None:
    log = (
        Log()
        .state(40, "running")
        .cut(89, step=1, cut_at_s=70, kind="simulated", tokens_lost=2, resume_s=19.0)
        .call(100, 1, 10, queue=50)
    )
    timeline = step_timeline(log.events, _at(0), _at(100))
    assert _phases(timeline, 1) == [
        ("preempted", 40, 70),
        ("resuming", 70, 89),
        ("queue", 89, 90),
        ("ttft", 90, 90.5),
        ("generation", 90.5, 100),
    ]
    [row] = timeline.rows
    assert [(c.step, c.at) for c in row.cuts] == [(1, _at(70))]
    assert (
        row.phases[0].tip == "step 1 · generation cut (node lost) on gpu-a (simulated): 40 tokens kept, 2 lost: 30.0 s"
    )
    assert "resumed after a cut" in row.phases[-1].tip


def test_a_generation_cut_and_not_placed_again_yet_is_drawn_as_cut_at_once_not_as_queue_wait() -> None:
    """The workflow writes a cut's `interruption` event only once the step has its new place; until then its wait,
    which says the step resumes from a cut, is what marks the cut on a live task's page."""
    resuming = "gpu: step 2 resuming: the worker shut down mid-generation (gpu-a)"
    log = (
        Log()
        .state(0, "running")
        .call(10, 1, 4, tool_calls=["search"])
        .step(12, 1)
        .add("state", 20, status="waiting_for_gpu", step=1, waiting_for=resuming, gpu_trouble="preemption")
        .add("state", 21, status="waiting_for_gpu", step=1, waiting_for="gpu: place 1", gpu_trouble="preemption")
    )
    timeline = step_timeline(log.events, _at(0), _at(30), live=True)
    assert _phases(timeline, 2) == [("preempted", 12, 20), ("gpu", 20, 21), ("gpu", 21, 30)]  # each wait its words
    [row] = [r for r in timeline.rows if r.step == 2]
    assert [(c.step, c.at) for c in row.cuts] == [(2, _at(20))]
    assert row.cuts[0].tip == f"step 2 · generation cut, not resumed yet ({resuming})"

    placed = log.state(26, "running").cut(27, step=2, cut_at_s=20, kind="notice")
    timeline = step_timeline(placed.events, _at(0), _at(30), live=True)
    # Placed again: the event draws the cut once, and the step generates on its new place since.
    assert _phases(timeline, 2) == [
        ("preempted", 12, 20),
        ("gpu", 20, 21),
        ("gpu", 21, 26),
        ("resuming", 26, 27),
        ("generating", 27, 30),
    ]
    [row] = [r for r in timeline.rows if r.step == 2]
    assert [c.at for c in row.cuts] == [_at(20)] and "resumed on gpu-b" in row.cuts[0].tip


def test_a_step_asked_for_again_after_a_wait_for_budget_keeps_its_load_and_its_wait_in_its_row() -> None:
    # As a parked task's log reads: its first step's replica loaded, then the task waited for budget, and the call
    # was asked for again (its queue wait measured from then).
    log = (
        Log()
        .state(0, "running")
        .add("replica_loading", 0.1, status="running", node_id="gpu-a", model="m", tier="disk")
        .state(0.2, "waiting_for_gpu", "a cold start: m loading on gpu-a")
        .state(8, "running")
        .add("replica_loaded", 8.01, status="running", node_id="gpu-a", seconds=7.9)
        .state(8.1, "awaiting_budget", "budget: 56 more tokens for the next step")
        .state(12, "running")
        .call(13, 1, 0.9, queue=0.0)
    )
    timeline = step_timeline(log.events, _at(0), _at(13))
    assert _phases(timeline, 1) == [
        ("queue", 0, 0.1),
        ("load", 0.1, 8),
        ("queue", 8, 8.1),
        ("budget", 8.1, 12),
        ("queue", 12, 12.1),
        ("ttft", 12.1, 12.6),
        ("generation", 12.6, 13),
    ]


def test_waits_for_a_tool_worker_and_for_a_person_are_drawn_as_such() -> None:
    log = (
        Log()
        .state(0, "running")
        .call(10, 1, 4, tool_calls=["search", "ask_human"])
        .add("waiting_for_tool_worker", 20, status="running", waiting_for="a tool worker on q", task_queue="q")
        .state(50, "running")
        .state(55, "awaiting_input", "input: a human answer")
        .state(70, "running")
        .step(71, 1)
    )
    timeline = step_timeline(log.events, _at(0), _at(72), live=True)
    assert _phases(timeline, 1)[-5:] == [
        ("tools", 10, 20),
        ("tool_worker", 20, 50),
        ("tools", 50, 55),
        ("input", 55, 70),
        ("tools", 70, 71),
    ]


def test_a_load_in_the_step_being_generated_is_drawn_then_the_generation_since() -> None:
    log = (
        Log()
        .state(0, "running")
        .add("replica_loading", 2, status="running", node_id="gpu-a", model="m", tier="disk")
        .state(2.1, "waiting_for_gpu", "a cold start: m loading on gpu-a (weights from its disk)")
        .state(8, "running")
        .add("replica_loaded", 8.1, status="running", node_id="gpu-a", seconds=6.0)
    )
    timeline = step_timeline(log.events, _at(0), _at(12), live=True)
    assert _phases(timeline, 1) == [("queue", 0, 2), ("load", 2, 8), ("generating", 8, 12)]
    assert timeline.rows[0].where == "gpu-a"
    assert timeline.kinds == ["queue", "load", "generating"]


def test_every_phase_has_words_and_a_colour_of_its_own() -> None:
    css = open("orchestrator/ui/static/berth.css").read()
    for kind in PHASE_WORDS:
        assert f".phase-{kind} {{" in css and f".key.phase-{kind} {{" in css, kind


@pytest.mark.parametrize(
    "seconds", [0.05, 0.3, 0.9, 1, 4, 7, 29, 59, 61, 90, 125, 179, 181, 300, 599, 1000, 3599, 3700, 7300, 20000, 90000]
)
def test_axis_ticks_are_distinct_exact_and_few_at_every_scale(seconds: float) -> None:
    ticks = axis_ticks(seconds)
    labels = [label for _, label in ticks]
    assert labels[0] == "0" and len(set(labels)) == len(labels), labels
    assert 2 <= len(ticks) <= MAX_TICKS + 1 or seconds < 0.1, labels
    for at, label in ticks[1:]:
        assert _seconds_of(label) == pytest.approx(at), (label, at)


def test_the_axis_of_a_three_minute_task_no_longer_repeats_a_minute() -> None:
    assert [label for _, label in axis_ticks(180)] == [
        "0",
        "+30 s",
        "+1 min",
        "+1 min 30 s",
        "+2 min",
        "+2 min 30 s",
        "+3 min",
    ]


def _seconds_of(label: str) -> float:
    units = {"h": 3600, "min": 60, "s": 1}
    return sum(float(n) * units[u] for n, u in re.findall(r"([\d.]+) (h|min|s)\b", label))
