"""A task's steps as a waterfall: where each step's time went, on one clock from the task's start.

Read from the task's typed events (sdk/wire/task_events.py), so every phase is drawn as the task lived it:

- a booked call (`llm_call`, written when the call settles) gives its own last placement exactly: the replica's
  load, the time to the first token and the generation, laid back from the settle; its queue wait (measured by
  the workflow from the step's first ask) is where the step was before that placement;
- inside that wait, and after a call, the task's own events say what it waited for: the state it recorded
  (`awaiting_budget`, `waiting_for_gpu`, `awaiting_input`), a `waiting_for_tool_worker`, a `replica_loading` until
  its `replica_loaded`, and an `interruption` (a generation cut when its node was lost, then the time until the
  step was placed again). What no event accounts for stays a queue wait before the call, and the tools after a
  call that asked for them;
- the step being generated now (a live task's step with no booked call yet) is drawn too, open-ended up to now;
  a cut of it is drawn as soon as the workflow says it looks for a new place, before its `interruption` event.

Each phase has its own colour and legend entry (PHASE_WORDS); a wait is never drawn as work. Drawn as SVG on the
server, with a tooltip per phase, like the other charts.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from markupsafe import Markup, escape

from sdk import TaskStatus
from sdk.wire.task_events import (
    InterruptionEvent,
    ModelCallEvent,
    ReplicaLoadedEvent,
    ReplicaLoadingEvent,
    StepRecordedEvent,
    TaskSnapshot,
    TypedTaskEvent,
    WaitingForToolWorkerEvent,
)

from .charts import value_text

# The latest steps fit on a screen; older ones are in the steps table below the chart.
STEPS_DRAWN = 60
ROW, LABEL, WIDTH, TOP, RIGHT = 20, 150, 960, 26, 12
TICK_SECONDS = (0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400, 28800, 86400)
MAX_TICKS = 8
# Every phase the waterfall draws, in legend order, with what its legend and tooltips call it.
PHASE_WORDS = {
    "queue": "queue wait",
    "gpu": "waiting for a GPU",
    "load": "replica load",
    "ttft": "time to first token",
    "generation": "generation",
    "generating": "generating now",
    "preempted": "generation cut (node lost)",
    "resuming": "placing again after a cut",
    "tools": "tools",
    "tool_worker": "waiting for a tool worker",
    "budget": "waiting for budget",
    "input": "waiting for a person",
}
# Where spans overlap (a GPU wait inside a cut's resumption, a load inside a GPU wait), the higher one is drawn:
# what the task was doing beats why it was not yet doing it.
_RANK = {
    "preempted": 7,
    "load": 6,
    "budget": 5,
    "input": 5,
    "tool_worker": 4,
    "gpu": 3,
    "resuming": 2,
}
_WAITING_STATES = {
    TaskStatus.awaiting_budget: "budget",
    TaskStatus.waiting_for_gpu: "gpu",
    TaskStatus.awaiting_input: "input",
}


@dataclass(frozen=True)
class Phase:
    step: int
    kind: str  # a PHASE_WORDS key
    start: datetime
    end: datetime
    tip: str


@dataclass(frozen=True)
class Cut:
    """A node lost under a step, and where the step went on."""

    step: int
    at: datetime
    tip: str


@dataclass(frozen=True)
class StepRow:
    step: int
    where: str
    phases: list[Phase]
    cuts: list[Cut]


@dataclass(frozen=True)
class Timeline:
    rows: list[StepRow]
    start: datetime
    end: datetime
    left_out: int  # older steps not drawn

    @property
    def seconds(self) -> float:
        return max(0.001, (self.end - self.start).total_seconds())

    @property
    def kinds(self) -> list[str]:
        """The phases drawn, in legend order: what the legend lists."""
        drawn = {p.kind for r in self.rows for p in r.phases}
        return [k for k in PHASE_WORDS if k in drawn]


@dataclass(frozen=True)
class _Span:
    """Something the task's events say it was doing (or waiting for) from `start` to `end`."""

    kind: str
    start: datetime
    end: datetime
    detail: str = ""


def step_timeline(
    events: Iterable[TypedTaskEvent], started_at: datetime | None, until: datetime, *, live: bool = False
) -> Timeline:
    """The waterfall of the task's events; `until` is the task's end, or now while it runs (`live`), when the step
    being generated is drawn up to it."""
    log = sorted(events, key=lambda e: e.seq)
    calls: dict[int, ModelCallEvent] = {}
    recorded: dict[int, datetime] = {}
    for e in log:
        if isinstance(e, ModelCallEvent):
            calls[e.data.step] = e  # a step's booked call; a later attempt replaces it
        elif isinstance(e, StepRecordedEvent):
            recorded.setdefault(e.data.step, e.at)
    spans = _waits(log, until) + _loads(log, until)
    interruptions = [e for e in log if isinstance(e, InterruptionEvent)]

    begins: dict[int, datetime] = {step: _call_parts(call)[0] for step, call in calls.items()}
    # A step whose call was asked for again (after a wait for budget, a round starts over) began before its booked
    # call's queue wait did: when the previous step's step event was written (the next step's first ask), or, for
    # the first step drawn, at the task's first event.
    for step in sorted(calls):
        if step - 1 in calls:
            asked = recorded.get(step - 1)
            if asked is not None and asked >= calls[step - 1].at:
                begins[step] = min(begins[step], asked)
        elif step == min(calls) and log:
            begins[step] = min(begins[step], log[0].at)
    last = max(calls, default=0)
    open_step: int | None = None
    if live:
        first = min([e.at for e in log] + ([started_at] if started_at else []), default=until)
        if last == 0:
            open_step, begins[1] = 1, first
        elif last in recorded and recorded[last] >= calls[last].at:
            # The step event of the last booked step is written when the next step asks for its place.
            open_step, begins[last + 1] = last + 1, recorded[last]
    steps = sorted(begins)
    drawn = steps[-STEPS_DRAWN:]
    rows: list[StepRow] = []
    for index, step in enumerate(steps):
        if step not in drawn:
            continue
        following = steps[index + 1] if index + 1 < len(steps) else None
        next_begin = begins[following] if following is not None else until
        cuts = [e for e in interruptions if e.data.step == step]
        own = spans + _cut_spans(cuts, begins[step], spans)
        if step == open_step:
            pending = _unplaced_cut(log, step, begins[step], cuts)
            marks = [_cut(e) for e in cuts] + ([_pending_cut(pending, step)] if pending is not None else [])
            if pending is not None:
                own += _unplaced_cut_spans(pending, begins[step], cuts, spans, until)
            phases = _open_step(step, begins[step], until, own)
            rows.append(StepRow(step, _latest_place(log, step, begins[step]), phases, marks))
            continue
        call = calls[step]
        phases = _booked_step(step, call, own, begins[step], next_begin, bool(cuts))
        rows.append(StepRow(step, call.data.node_id or call.data.served_by, phases, [_cut(e) for e in cuts]))
    moments = [p.start for r in rows for p in r.phases] + [c.at for r in rows for c in r.cuts]
    start = min(moments + ([started_at] if started_at else []), default=until)
    end = max([p.end for r in rows for p in r.phases] + [c.at for r in rows for c in r.cuts], default=until)
    if live:
        end = max(end, until)
    return Timeline(rows, start, max(end, start + timedelta(milliseconds=1)), len(steps) - len(drawn))


# ----- what the events say the task was doing ---------------------------------------------------------------------


def _waits(log: Sequence[TypedTaskEvent], until: datetime) -> list[_Span]:
    """The task's waits, from the state every workflow event carries: for budget, for a GPU, for a person, and
    (from its own event until the task's state moves on) for a tool worker."""
    spans: list[_Span] = []
    current: tuple[str, str, datetime] | None = None  # (kind, what it waits for, since)
    tool_worker: str | None = None  # the waiting_for a tool-worker wait said
    for e in log:
        data = e.data
        if not isinstance(data, TaskSnapshot) or data.status is None:
            continue
        if isinstance(e, WaitingForToolWorkerEvent):
            tool_worker = data.waiting_for
        elif tool_worker is not None and data.waiting_for != tool_worker:
            tool_worker = None
        kind = "tool_worker" if tool_worker is not None else _WAITING_STATES.get(data.status)
        said = (kind, data.waiting_for or "") if kind is not None else None
        if current is not None and said != current[:2]:
            spans.append(_Span(current[0], current[2], e.at, current[1]))
            current = None
        if said is not None and current is None:
            current = (*said, e.at)
    if current is not None:
        spans.append(_Span(current[0], current[2], until, current[1]))
    return [s for s in spans if s.end > s.start]


def _loads(log: Sequence[TypedTaskEvent], until: datetime) -> list[_Span]:
    """Each replica load a step waited for: from its `replica_loading` until its `replica_loaded`, or until the task
    said it no longer waits (the load failed, or was cut), or until now."""
    spans: list[_Span] = []
    for i, e in enumerate(log):
        if not isinstance(e, ReplicaLoadingEvent):
            continue
        end, seconds = until, None
        for later in log[i + 1 :]:
            if isinstance(later, ReplicaLoadedEvent):
                end, seconds = later.at, later.data.seconds
                break
            if isinstance(later, InterruptionEvent | ReplicaLoadingEvent) or (
                isinstance(later.data, TaskSnapshot)
                and later.data.status is not None
                and later.data.status != TaskStatus.waiting_for_gpu
            ):
                end = later.at  # the task runs again without a loaded replica: the load failed or was cut
                break
        where = f"{e.data.model} on {e.data.node_id}" + (f" (weights from {e.data.tier})" if e.data.tier else "")
        said = f", ready after {_seconds(seconds)}" if seconds is not None else ""
        spans.append(_Span("load", e.at, end, where + said))
    return [s for s in spans if s.end > s.start]


def _cut_spans(cuts: Sequence[InterruptionEvent], begin: datetime, spans: Sequence[_Span]) -> list[_Span]:
    """A cut generation (from the step's last placement before the cut, to the cut) and the time from the cut until
    the step had its new place (the interruption event is written then)."""
    out: list[_Span] = []
    placed = begin
    for e in cuts:
        at = _cut_at(e)
        before = [s.end for s in spans if s.kind in ("gpu", "load") and placed <= s.end <= at]
        start = max([placed, *before])
        cut = e.data
        out.append(
            _Span(
                "preempted",
                start,
                at,
                f"on {cut.node_id} ({cut.kind}): {cut.tokens_kept:,} tokens kept, {cut.tokens_lost:,} lost",
            )
        )
        resumed = f"on {cut.resumed_on}" + (f" ({cut.resumed_tier})" if cut.resumed_tier else "")
        out.append(_Span("resuming", at, max(at, e.at), resumed if cut.resumed_on else "not placed yet"))
        placed = max(at, e.at)
    return out


@dataclass(frozen=True)
class _UnplacedCut:
    """A cut the workflow has said (it looks for a new place), before it writes the `interruption` event."""

    at: datetime
    said: str  # the wait's own words ("gpu: step 7 resuming: … (gpu-a)")


def _unplaced_cut(
    log: Sequence[TypedTaskEvent], step: int, begin: datetime, cuts: Sequence[InterruptionEvent]
) -> _UnplacedCut | None:
    """The step's cut that has no new place yet: the workflow says it at once (a wait whose `gpu_trouble` is
    "preemption"), but writes its `interruption` event only once the step is placed again."""
    since = max([begin, *(e.at for e in cuts)])
    for e in log:
        if e.at >= since and isinstance(e.data, TaskSnapshot) and e.data.gpu_trouble == "preemption":
            return _UnplacedCut(e.at, e.data.waiting_for or "")
    return None


def _unplaced_cut_spans(
    cut: _UnplacedCut, begin: datetime, cuts: Sequence[InterruptionEvent], spans: Sequence[_Span], until: datetime
) -> list[_Span]:
    """The generation cut (from the step's last placement to the cut), then the search for a new place, up to now."""
    placed = max([begin, *(e.at for e in cuts)])
    before = [s.end for s in spans if s.kind in ("gpu", "load") and placed <= s.end <= cut.at]
    return [
        _Span("preempted", max([placed, *before]), cut.at, f"({cut.said})" if cut.said else ""),
        _Span("resuming", cut.at, until, "(not placed yet)"),
    ]


def _pending_cut(cut: _UnplacedCut, step: int) -> Cut:
    return Cut(step, cut.at, f"step {step} · generation cut, not resumed yet" + (f" ({cut.said})" if cut.said else ""))


# ----- a step's row -----------------------------------------------------------------------------------------------


def _call_parts(call: ModelCallEvent) -> tuple[datetime, datetime, datetime, datetime]:
    """(the step's first ask, its last placement's load start, generation start, first token), laid back from the
    settle: the workflow measured the queue wait from the step's first ask to that placement."""
    data = call.data
    duration = data.duration_s
    call_start = call.at - timedelta(seconds=duration)
    first_token = call_start + timedelta(seconds=min(duration, data.ttft_s or 0.0))
    load_start = call_start - timedelta(seconds=data.load_s or 0.0)
    return load_start - timedelta(seconds=data.queue_wait_s or 0.0), load_start, call_start, first_token


def _booked_step(
    step: int, call: ModelCallEvent, spans: list[_Span], begin: datetime, next_begin: datetime, cut: bool
) -> list[Phase]:
    _, load_start, call_start, first_token = _call_parts(call)
    data = call.data
    where = f" on {data.node_id}" if data.node_id else ""
    tier = f" ({data.tier})" if data.tier else ""
    resumed = " (resumed after a cut)" if cut else ""
    phases = _paint(step, begin, load_start, spans, "queue")
    phases += [
        Phase(
            step, "load", load_start, call_start, f"step {step} · replica load{where}{tier}: {_seconds(data.load_s)}"
        ),
        Phase(
            step,
            "ttft",
            call_start,
            first_token,
            f"step {step} · time to first token: {_seconds((first_token - call_start).total_seconds())}",
        ),
        Phase(
            step,
            "generation",
            first_token,
            call.at,
            f"step {step} · generation{where}{resumed}: {data.completion_tokens:,} tokens"
            f" in {_seconds((call.at - first_token).total_seconds())}",
        ),
    ]
    after = "tools" if data.tool_calls else None
    names = ", ".join(data.tool_calls)
    generation = phases[-1]
    phases += _paint(step, call.at, next_begin, spans, after, names)
    return [p for p in phases if p.end > p.start] or [generation]


def _open_step(step: int, begin: datetime, until: datetime, spans: list[_Span]) -> list[Phase]:
    """The step being generated now: what its events say, and since its last placement, generating, up to now."""
    phases = _paint(step, begin, until, spans, "queue")
    if phases and phases[-1].kind == "queue" and phases[-1].end >= until:
        last = phases[-1]
        phases[-1] = replace(
            last, kind="generating", tip=f"step {step} · generating now: for {_span(last.end - last.start)} so far"
        )
    return phases


def _paint(
    step: int, start: datetime, end: datetime, spans: Sequence[_Span], default: str | None, default_detail: str = ""
) -> list[Phase]:
    """[start, end) as phases: at each moment the highest-ranked span covering it, else `default` (None: nothing)."""
    if end <= start:
        return []
    inside = [s for s in spans if s.start < end and s.end > start]
    edges = sorted({start, end} | {t for s in inside for t in (s.start, s.end) if start < t < end})
    pieces: list[tuple[str | None, str, datetime, datetime]] = []
    for a, b in zip(edges, edges[1:], strict=False):
        covering = [s for s in inside if s.start <= a and s.end >= b]
        best = max(covering, key=lambda s: _RANK[s.kind], default=None)
        kind, detail = (best.kind, best.detail) if best is not None else (default, default_detail)
        if pieces and pieces[-1][:2] == (kind, detail):
            pieces[-1] = (kind, detail, pieces[-1][2], b)
        else:
            pieces.append((kind, detail, a, b))
    return [
        Phase(step, kind, a, b, _tip(step, kind, detail, b - a)) for kind, detail, a, b in pieces if kind is not None
    ]


def _tip(step: int, kind: str, detail: str, span: timedelta) -> str:
    """ "step 3 · waiting for a GPU (gpu: no free GPU …): 12.0 s", "step 3 · replica load m on gpu-a: 3.0 s"."""
    if kind in ("tools", "load", "preempted", "resuming"):
        said = f"{PHASE_WORDS[kind]}{' ' + detail if detail else ''}"
    else:
        said = f"{PHASE_WORDS[kind]}{f' ({detail})' if detail else ''}"
    return f"step {step} · {said}: {_span(span)}"


def _latest_place(log: Sequence[TypedTaskEvent], step: int, begin: datetime) -> str:
    """Where the step being generated is, as far as its events say (a load, or where a cut step resumed)."""
    place = ""
    for e in log:
        if e.at < begin:
            continue
        if isinstance(e, ReplicaLoadingEvent):
            place = e.data.node_id or place
        elif isinstance(e, InterruptionEvent) and e.data.step == step:
            place = e.data.resumed_on or ""
    return place


def _cut_at(event: InterruptionEvent) -> datetime:
    # When the node was lost (the event itself is written once the step has its new place); a time without a
    # zone cannot be placed on the chart's clock.
    at = event.data.at
    return at if at is not None and at.tzinfo else event.at


def _cut(event: InterruptionEvent) -> Cut:
    cut = event.data
    resumed = (
        f"resumed on {cut.resumed_on}"
        + (f" ({cut.resumed_tier})" if cut.resumed_tier else "")
        + (f" after {_seconds(cut.resume_s)}" if cut.resume_s is not None else "")
        if cut.resumed_on
        else "not resumed yet"
    )
    tip = (
        f"step {cut.step} · {cut.node_id} lost ({cut.kind}): "
        f"{cut.tokens_kept:,} tokens kept, {cut.tokens_lost:,} lost; {resumed}"
    )
    return Cut(cut.step, _cut_at(event), tip)


# ----- drawing ----------------------------------------------------------------------------------------------------


def timeline_svg(timeline: Timeline) -> Markup:
    """The waterfall: a row per step, a bar per phase, a red mark where a node was lost; seconds from the start."""
    height = TOP + ROW * max(1, len(timeline.rows)) + 8
    plot = WIDTH - LABEL - RIGHT

    def x(at: datetime) -> float:
        return LABEL + plot * (at - timeline.start).total_seconds() / timeline.seconds

    parts = [_ticks(timeline.seconds, plot, height)]
    for i, row in enumerate(timeline.rows):
        y = TOP + i * ROW
        parts.append(
            f'<text x="{LABEL - 8}" y="{y + 14}" text-anchor="end" class="chart-label step-label">'
            f"step {row.step}{' · ' + escape(row.where) if row.where else ''}</text>"
        )
        parts.append(f'<g class="step-row" data-step="{row.step}">')
        for phase in row.phases:
            left, right = x(phase.start), x(phase.end)
            parts.append(
                f'<rect class="phase phase-{phase.kind} hit" x="{left:.1f}" y="{y + 4}" width="{max(1.5, right - left):.1f}"'
                f' height="{ROW - 8}" data-phase="{phase.kind}" data-tip="{escape(phase.tip)}"'
                f' data-x="{left:.1f}"><title>{escape(phase.tip)}</title></rect>'
            )
        for cut in row.cuts:
            at = x(cut.at)
            parts.append(
                f'<g class="cut hit" data-tip="{escape(cut.tip)}" data-x="{at:.1f}"><title>{escape(cut.tip)}</title>'
                f'<line class="cut-line" x1="{at:.1f}" y1="{y + 1}" x2="{at:.1f}" y2="{y + ROW - 1}"/>'
                f'<path class="cut-mark" d="M{at - 4:.1f},{y + 1} L{at + 4:.1f},{y + 1} L{at:.1f},{y + 7} Z"/></g>'
            )
        parts.append("</g>")
    label = f"{len(timeline.rows)} steps over {_span(timeline.end - timeline.start)}"
    return Markup(
        f'<svg class="timeline" id="timeline" viewBox="0 0 {WIDTH} {height}" role="img"'
        f' aria-label="{escape(label)}" data-steps="{len(timeline.rows)}">'
        f"<title>{escape(label)}</title>"
        f'<line class="chart-guide" x1="0" y1="{TOP}" x2="0" y2="{height}"/>{"".join(parts)}</svg>'
    )


def tick_every(seconds: float) -> float:
    """The step between the axis's ticks: the first round step that puts at most MAX_TICKS of them on the span."""
    return next((t for t in TICK_SECONDS if seconds / t <= MAX_TICKS), TICK_SECONDS[-1])


def tick_label(tick: float, every: float) -> str:
    """A tick's time from the start, exact to the tick's step, so no two ticks of an axis read the same:
    "+0.5 s", "+45 s", "+1 min 30 s", "+2 min", "+1 h 30 min"."""
    if tick <= 0:
        return "0"
    if every < 1:
        return f"+{tick:.1f} s"
    whole = round(tick)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{hours} h"] if hours else []
    if minutes:
        parts.append(f"{minutes} min")
    if secs:
        parts.append(f"{secs} s")
    return "+" + " ".join(parts)


def axis_ticks(seconds: float) -> list[tuple[float, str]]:
    """The axis's ticks over a span of `seconds`: (seconds from the start, label)."""
    every = tick_every(seconds)
    count = int(seconds / every + 1e-9)
    return [(i * every, tick_label(i * every, every)) for i in range(count + 1)]


def _ticks(seconds: float, plot: float, height: int) -> str:
    out = []
    for tick, text in axis_ticks(seconds):
        x = LABEL + plot * tick / seconds
        out.append(
            f'<line class="chart-grid" x1="{x:.1f}" y1="{TOP - 4}" x2="{x:.1f}" y2="{height - 4}"/>'
            f'<text x="{x:.1f}" y="{TOP - 8}" text-anchor="middle" class="chart-label x-tick">{text}</text>'
        )
    return "".join(out)


def _seconds(value: float | None) -> str:
    return value_text(value or 0.0, "s")


def _span(span: timedelta) -> str:
    """A duration as a tooltip says it: "850 ms", "7.5 s", "1 min 35 s", "1 h 4 min"."""
    s = span.total_seconds()
    if s < 60:
        return _seconds(s)
    whole = round(s)
    if whole < 3600:
        minutes, secs = divmod(whole, 60)
        return f"{minutes} min {secs} s" if secs else f"{minutes} min"
    hours, rest = divmod(whole, 3600)
    return f"{hours} h {rest // 60} min" if rest // 60 else f"{hours} h"
