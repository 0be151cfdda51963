"""Time charts drawn as SVG on the server: axes with wall-clock ticks, a value scale, and a tooltip per moment.

Drawn here rather than by a chart library so that a page shows its charts with nothing to load and nothing
from outside Berth (the pages' CSP allows only Berth's own scripts). Every chart spans the window it
names, whatever its data covers, so two panels side by side read on the same clock; a moment's values are
in its hit area's `data-tip` (charts.js shows them as the pointer moves) and in its `<title>` (the
browser's own tooltip, and what a screen reader says). Colours come from CSS classes: the CSP allows no
inline styles.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal

from markupsafe import Markup, escape

# Ticks far enough apart to be read at the chart's width: at most about six labels an axis.
TICK_MINUTES = (1, 2, 5, 10, 15, 30, 60, 120, 360, 720, 1440)
MAX_TIME_TICKS = 7
SERIES_COLOURS = 6


@dataclass(frozen=True)
class Series:
    """One line (or one set of bars): its points (time, value), oldest first."""

    name: str
    points: Sequence[tuple[datetime, float]]


@dataclass(frozen=True)
class Window:
    """The span of time a chart covers."""

    start: datetime
    end: datetime

    @classmethod
    def last(cls, span: timedelta, now: datetime | None = None) -> Window:
        end = now or datetime.now(UTC)
        return cls(end - span, end)

    @property
    def words(self) -> str:
        """ "last 60 min", as every panel's caption says it."""
        minutes = (self.end - self.start).total_seconds() / 60
        return f"last {minutes:.0f} min" if minutes < 180 else f"last {minutes / 60:.0f} h"

    def share(self, at: datetime) -> float:
        """Where `at` falls in the window, 0 at its start and 1 at its end."""
        return (at - self.start).total_seconds() / max(1e-9, (self.end - self.start).total_seconds())


@dataclass(frozen=True)
class Frame:
    """The drawing box: the plot area inside the margins that hold the axes' labels."""

    width: int
    height: int
    left: int
    right: int
    top: int
    bottom: int

    @property
    def plot_width(self) -> float:
        return self.width - self.left - self.right

    @property
    def plot_height(self) -> float:
        return self.height - self.top - self.bottom

    def x(self, share: float) -> float:
        return self.left + share * self.plot_width

    def y(self, value: float, top_value: float) -> float:
        return self.top + self.plot_height * (1 - value / top_value)


PANEL = Frame(width=520, height=190, left=52, right=12, top=12, bottom=26)
SPARK = Frame(width=220, height=56, left=4, right=4, top=6, bottom=16)


def time_chart(
    chart_id: str,
    series: Sequence[Series],
    window: Window,
    unit: str,
    *,
    kind: Literal["line", "bars"] = "line",
    top: float | None = None,
    whole: bool = False,
    label: Callable[[float], str] | None = None,
) -> Markup:
    """A panel's chart: a time axis over `window`, a value axis from 0 (to `top` when the scale is fixed,
    as 100 for a percentage), gridlines, one line (or bars) per series, a legend when there are several.
    `whole` is for counts (replicas): the scale's every gridline falls on a whole number."""
    say = label or (lambda v: value_text(v, unit))
    highest = max((v for s in series for _, v in s.points), default=0.0)
    peak = top if top is not None else (4.0 * max(1, math.ceil(highest / 4)) if whole else nice_top(highest))
    f = PANEL
    parts = [_gridlines(f, peak, say), _time_axis(f, window)]
    if not any(s.points for s in series):
        parts.append(
            f'<text x="{f.x(0.5):.0f}" y="{f.y(peak / 2, peak):.0f}" text-anchor="middle" class="chart-empty">'
            f"no data in the {escape(window.words)}</text>"
        )
    elif kind == "bars":
        parts.append(_bars(f, series[0], window, peak))
    else:
        parts.extend(_line(f, s, i, window, peak) for i, s in enumerate(series))
    parts.append(_hits(f, series, window, say))
    latest = {s.name: s.points[-1][1] for s in series if s.points}
    title = f"{', '.join(s.name for s in series)} ({unit}), {window.words}"
    legend = _legend(series) if len(series) > 1 else Markup("")
    return (
        Markup(
            f'<svg class="chart" id="{escape(chart_id)}" viewBox="0 0 {f.width} {f.height}" role="img"'
            f' aria-label="{escape(title)}" data-points="{sum(len(s.points) for s in series)}"'
            f' data-latest="{escape(_latest_text(latest, say))}" data-top="{peak:g}">'
            f"<title>{escape(title)}</title>{''.join(parts)}</svg>"
        )
        + legend
    )


def sparkline(
    chart_id: str,
    subject: str,
    series: Sequence[Series],
    window: Window,
    unit: str,
    label: Callable[[float], str] | None = None,
) -> Markup:
    """A small chart for a table cell: the window's two ends and the peak written, a tooltip per moment.
    `subject` is what it shows ("time to first token"): what a screen reader says, data or none."""
    say = label or (lambda v: value_text(v, unit))
    f = SPARK
    highest = max((v for s in series for _, v in s.points), default=0.0)
    peak = nice_top(highest)
    parts = [
        f'<line class="chart-axis" x1="{f.left}" y1="{f.y(0, peak):.1f}" x2="{f.width - f.right}"'
        f' y2="{f.y(0, peak):.1f}"/>',
        f'<text x="{f.left}" y="{f.height - 3}" class="chart-label">{_clock(window.start)}</text>',
        f'<text x="{f.width - f.right}" y="{f.height - 3}" text-anchor="end" class="chart-label">now</text>',
    ]
    if any(s.points for s in series):
        parts.append(
            f'<text x="{f.width - f.right}" y="{f.top + 8}" text-anchor="end" class="chart-label">'
            f"max {escape(say(highest))}</text>"
        )
        parts.extend(_line(f, s, i, window, peak) for i, s in enumerate(series))
        parts.append(_hits(f, series, window, say))
    else:
        parts.append(
            f'<text x="{f.x(0.5):.0f}" y="{f.top + 20}" text-anchor="middle" class="chart-empty">no data</text>'
        )
    names = f" {', '.join(s.name for s in series)}" if len(series) > 1 else ""
    title = f"{subject}{names} ({unit}), {window.words}"
    return Markup(
        f'<svg class="spark" id="{escape(chart_id)}" viewBox="0 0 {f.width} {f.height}" role="img"'
        f' aria-label="{escape(title)}" data-points="{sum(len(s.points) for s in series)}">'
        f"<title>{escape(title)}</title>{''.join(parts)}</svg>"
    )


def nice_top(peak: float) -> float:
    """The top of a value axis: the first round number (1, 2, 2.5, 5 times a power of ten) at or above the peak."""
    if peak <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(peak))
    for step in (1, 2, 2.5, 5, 10):
        if peak <= step * power + 1e-9:
            return step * power
    return 10 * power


def value_text(value: float, unit: str) -> str:
    """A value as an axis or tooltip says it, in the unit the panel counts."""
    if unit == "s":
        return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.1f} s"
    if unit == "%":
        return f"{value:.0f}%"
    if value >= 100 or value == int(value):
        number = f"{value:,.0f}"
    elif value >= 10:
        number = f"{value:.1f}"
    else:  # a gridline's 0.25 stays 0.25, not a rounded 0.2 beside 0.5
        number = f"{value:.2f}".rstrip("0").rstrip(".")
    return f"{number} {unit}" if unit == "GiB" else number


def _gridlines(f: Frame, top: float, say: Callable[[float], str]) -> str:
    out = []
    for i in range(5):
        value = top * i / 4
        y = f.y(value, top)
        out.append(
            f'<line class="chart-grid{" chart-axis" if i == 0 else ""}" x1="{f.left}" y1="{y:.1f}"'
            f' x2="{f.width - f.right}" y2="{y:.1f}"/>'
            f'<text x="{f.left - 6}" y="{y + 4:.1f}" text-anchor="end" class="chart-label y-tick">'
            f"{escape(say(value))}</text>"
        )
    return "".join(out)


def _time_axis(f: Frame, window: Window) -> str:
    """Ticks on round minutes of the wall clock (UTC), as many as fit."""
    span_min = (window.end - window.start).total_seconds() / 60
    every = next((m for m in TICK_MINUTES if span_min / m <= MAX_TIME_TICKS - 1), TICK_MINUTES[-1])
    start = window.start.astimezone(UTC)
    midnight = start.replace(hour=0, minute=0, second=0, microsecond=0)
    minutes = (start - midnight).total_seconds() / 60
    out, tick = [], midnight + timedelta(minutes=math.ceil(minutes / every) * every)
    while tick <= window.end:
        x = f.x(window.share(tick))
        out.append(
            f'<line class="chart-tick" x1="{x:.1f}" y1="{f.height - f.bottom}" x2="{x:.1f}"'
            f' y2="{f.height - f.bottom + 4}"/>'
            f'<text x="{x:.1f}" y="{f.height - f.bottom + 16}" text-anchor="middle" class="chart-label x-tick">'
            f"{_clock(tick)}</text>"
        )
        tick += timedelta(minutes=every)
    out.append(f'<text x="{f.width - f.right}" y="{f.top - 2}" text-anchor="end" class="chart-label">UTC</text>')
    return "".join(out)


def _line(f: Frame, series: Series, index: int, window: Window, top: float) -> str:
    points = [(f.x(window.share(at)), f.y(min(v, top), top)) for at, v in series.points if at >= window.start]
    if not points:
        return ""
    css = f"series-{index % SERIES_COLOURS}"
    if len(points) == 1:
        x, y = points[0]
        return f'<circle class="chart-dot {css}" cx="{x:.1f}" cy="{y:.1f}" r="3"/>'
    coords = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
    last_x, last_y = points[-1]
    return (
        f'<polyline class="chart-line {css}" fill="none" points="{coords}"/>'
        f'<circle class="chart-dot {css}" cx="{last_x:.1f}" cy="{last_y:.1f}" r="2.5"/>'
    )


def _bars(f: Frame, series: Series, window: Window, top: float) -> str:
    width = f.plot_width / max(1, len(series.points))
    out = []
    for at, value in series.points:
        if at < window.start or value <= 0:
            continue
        x = f.x(window.share(at))
        y = f.y(min(value, top), top)
        out.append(
            f'<rect class="chart-bar series-0" x="{x:.1f}" y="{y:.1f}" width="{max(1.0, width - 1):.1f}"'
            f' height="{f.height - f.bottom - y:.1f}"/>'
        )
    return "".join(out)


def _hits(f: Frame, series: Sequence[Series], window: Window, say: Callable[[float], str]) -> str:
    """One invisible column per moment any series has a point: hovering it names every series' value then."""
    moments = sorted({at for s in series for at, _ in s.points if at >= window.start})
    if not moments:
        return ""
    values = [dict(s.points) for s in series]
    xs = [f.x(window.share(at)) for at in moments]
    out = []
    for i, at in enumerate(moments):
        left = (xs[i - 1] + xs[i]) / 2 if i else f.left
        right = (xs[i] + xs[i + 1]) / 2 if i + 1 < len(xs) else f.width - f.right
        said = " · ".join(
            f"{s.name} {say(v[at])}" if len(series) > 1 else say(v[at]) for s, v in zip(series, values) if at in v
        )
        tip = f"{_clock(at, seconds=True)} UTC — {said}"
        out.append(
            f'<rect class="hit" x="{left:.1f}" y="{f.top}" width="{max(1.0, right - left):.1f}"'
            f' height="{f.plot_height:.1f}" data-tip="{escape(tip)}" data-x="{xs[i]:.1f}">'
            f"<title>{escape(tip)}</title></rect>"
        )
    return f'<line class="chart-guide" x1="0" y1="{f.top}" x2="0" y2="{f.height - f.bottom}"/>' + "".join(out)


def _legend(series: Sequence[Series]) -> Markup:
    keys = "".join(
        f'<li><span class="key series-{i % SERIES_COLOURS}"></span>{escape(s.name)}</li>' for i, s in enumerate(series)
    )
    return Markup(f'<ul class="chart-legend">{keys}</ul>')


def _latest_text(latest: dict[str, float], say: Callable[[float], str]) -> str:
    return ", ".join(f"{name} {say(value)}" for name, value in latest.items())


def _clock(at: datetime, seconds: bool = False) -> str:
    return at.astimezone(UTC).strftime("%H:%M:%S" if seconds else "%H:%M")
