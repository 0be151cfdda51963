"""A task's steps as a waterfall: where each step's time went, on one clock from the task's start.

Read from the booked calls' `llm_call` events (each carries its queue wait, load, TTFT and duration, and
is written when the call settles) and the `interruption` events (when a node was lost under a step, and
where the step resumed). A step's phases are laid back from its call's settle time: queue wait, then
the replica's load, then the time to the first token, then generation; the time after a call that asked
for tools, until the next step's queue wait began, is the tools' (and the step's bookkeeping). Drawn as
SVG on the server, with a tooltip per phase, like the other charts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from markupsafe import Markup, escape

from sdk.wire.task_events import InterruptionEvent, ModelCallEvent

from .charts import value_text

# The latest steps fit on a screen; older ones are in the steps table below the chart.
STEPS_DRAWN = 60
ROW, LABEL, WIDTH, TOP, RIGHT = 20, 150, 960, 26, 12
TICK_SECONDS = (0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400)
PHASE_WORDS = {
    "queue": "queue wait",
    "load": "load",
    "ttft": "time to first token",
    "generation": "generation",
    "tools": "tools",
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


def step_timeline(
    calls: Sequence[ModelCallEvent],
    interruptions: Sequence[InterruptionEvent],
    started_at: datetime | None,
    until: datetime,
) -> Timeline:
    """The waterfall of the task's booked calls; `until` ends the last step's tools (the task's end, or now)."""
    last_call: dict[int, ModelCallEvent] = {}
    for call in calls:
        last_call[call.data.step] = call  # a step's booked call; a later attempt replaces it
    steps = sorted(last_call)
    drawn = steps[-STEPS_DRAWN:]
    rows: list[StepRow] = []
    begins = {step: _phases(step, last_call[step])[0].start for step in steps}
    for step in drawn:
        call = last_call[step]
        phases = _phases(step, call)
        if call.data.tool_calls:
            later = [begins[s] for s in steps if s > step]
            tools_end = min(later) if later else until
            if tools_end > call.at:
                names = ", ".join(call.data.tool_calls)
                phases.append(
                    Phase(
                        step, "tools", call.at, tools_end, f"step {step} · tools {names}: {_span(tools_end - call.at)}"
                    )
                )
        cuts = [_cut(e) for e in interruptions if e.data.step == step]
        rows.append(StepRow(step, call.data.node_id or call.data.served_by, phases, cuts))
    moments = [p.start for r in rows for p in r.phases] + [c.at for r in rows for c in r.cuts]
    start = min(moments + ([started_at] if started_at else []), default=until)
    end = max([p.end for r in rows for p in r.phases] + [c.at for r in rows for c in r.cuts], default=until)
    return Timeline(rows, start, max(end, start + timedelta(milliseconds=1)), len(steps) - len(drawn))


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


def _phases(step: int, call: ModelCallEvent) -> list[Phase]:
    data = call.data
    end = call.at
    duration = data.duration_s
    ttft = min(duration, data.ttft_s or 0.0)
    load = data.load_s or 0.0
    queue = data.queue_wait_s or 0.0
    call_start = end - timedelta(seconds=duration)
    first_token = call_start + timedelta(seconds=ttft)
    load_start = call_start - timedelta(seconds=load)
    queue_start = load_start - timedelta(seconds=queue)
    where = f" on {data.node_id}" if data.node_id else ""
    tier = f" ({data.tier})" if data.tier else ""
    tokens = data.completion_tokens
    phases = [
        Phase(step, "queue", queue_start, load_start, f"step {step} · queue wait {_seconds(queue)}"),
        Phase(step, "load", load_start, call_start, f"step {step} · load{where}{tier} {_seconds(load)}"),
        Phase(step, "ttft", call_start, first_token, f"step {step} · time to first token {_seconds(ttft)}"),
        Phase(
            step,
            "generation",
            first_token,
            end,
            f"step {step} · generation{where}: {tokens:,} tokens in {_seconds(duration - ttft)}",
        ),
    ]
    return [p for p in phases if p.end > p.start] or [phases[-1]]


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
    # When the node was lost (the event itself is written once the step has its new place); a time without a
    # zone cannot be placed on the chart's clock.
    at = cut.at if cut.at is not None and cut.at.tzinfo else event.at
    return Cut(cut.step, at, tip)


def _ticks(seconds: float, plot: float, height: int) -> str:
    every = next((t for t in TICK_SECONDS if seconds / t <= 8), TICK_SECONDS[-1])
    out, tick = [], 0.0
    while tick <= seconds + 1e-9:
        x = LABEL + plot * tick / seconds
        out.append(
            f'<line class="chart-grid" x1="{x:.1f}" y1="{TOP - 4}" x2="{x:.1f}" y2="{height - 4}"/>'
            f'<text x="{x:.1f}" y="{TOP - 8}" text-anchor="middle" class="chart-label x-tick">'
            f"{'0' if tick == 0 else '+' + _span(timedelta(seconds=tick))}</text>"
        )
        tick += every
    return "".join(out)


def _seconds(value: float) -> str:
    return value_text(value, "s")


def _span(span: timedelta) -> str:
    s = span.total_seconds()
    if s < 90:
        return _seconds(s)
    return f"{s / 60:.0f} min" if s < 5400 else f"{s / 3600:.1f} h"
