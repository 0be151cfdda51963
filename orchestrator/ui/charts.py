"""Small line charts drawn as inline SVG on the server: no chart library, no CDN, nothing to load.

A chart here answers one question ("how many tokens a minute, this last hour?"), so it is one
line with its latest value, its peak and its time span written beside it; anything richer
belongs in a metrics system (see /metrics).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from markupsafe import Markup, escape

WIDTH, HEIGHT, PAD = 480, 120, 6


@dataclass(frozen=True)
class Series:
    """One line: its points (time, value), oldest first, and what a value counts."""

    name: str
    unit: str
    points: Sequence[tuple[datetime, float]]


def line_chart(chart_id: str, series: Series) -> Markup:
    """The series as an SVG polyline scaled to the box, with a title naming its latest value and peak."""
    values = [v for _, v in series.points]
    peak = max(values, default=0.0)
    latest = values[-1] if values else 0.0
    title = f"{series.name}: {_number(latest)} {series.unit} now, peak {_number(peak)}"
    if len(values) < 2:
        body = (f'<text x="{WIDTH / 2:.0f}" y="{HEIGHT / 2:.0f}" text-anchor="middle" class="chart-empty">'
                f'{escape("no data yet")}</text>')
    else:
        body = (f'<polyline class="chart-line" fill="none" points="{_points(values)}"/>'
                f'<text x="{PAD}" y="{PAD + 10}" class="chart-label">{escape(_number(peak))}</text>'
                f'<text x="{PAD}" y="{HEIGHT - PAD}" class="chart-label">0</text>'
                f'<text x="{WIDTH - PAD}" y="{HEIGHT - PAD}" text-anchor="end" class="chart-label">'
                f'{escape(_span(series.points))}</text>')
    return Markup(
        f'<svg class="chart" id="{escape(chart_id)}" viewBox="0 0 {WIDTH} {HEIGHT}" role="img"'
        f' aria-label="{escape(title)}" data-latest="{latest:g}" data-peak="{peak:g}" data-points="{len(values)}">'
        f'<title>{escape(title)}</title>'
        f'<line class="chart-axis" x1="{PAD}" y1="{HEIGHT - PAD}" x2="{WIDTH - PAD}" y2="{HEIGHT - PAD}"/>'
        f'{body}</svg>')


def _points(values: Sequence[float]) -> str:
    top = max(values) or 1.0
    step = (WIDTH - 2 * PAD) / (len(values) - 1)
    return " ".join(f"{PAD + i * step:.1f},{HEIGHT - PAD - (v / top) * (HEIGHT - 2 * PAD):.1f}"
                    for i, v in enumerate(values))


def _span(points: Sequence[tuple[datetime, float]]) -> str:
    minutes = (points[-1][0] - points[0][0]).total_seconds() / 60
    return f"last {minutes:.0f} min" if minutes >= 1 else f"last {minutes * 60:.0f} s"


def _number(value: float) -> str:
    return f"{value:,.0f}" if value >= 10 or value == int(value) else f"{value:.1f}"
