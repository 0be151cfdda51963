"""The UI's server-drawn charts: time axes on the wall clock, value scales, a tooltip per moment, the step
waterfall, and the figures the Overview's cards say."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from orchestrator.ui.charts import Series, Window, nice_top, sparkline, time_chart, value_text
from orchestrator.ui.model_history import ttft_history
from orchestrator.ui.overview import recent_rate
from orchestrator.ui.timeline import step_timeline, timeline_svg
from sdk import TaskEvent
from sdk.wire.task_events import InterruptionEvent, ModelCall, ModelCallEvent, parse_event

T0 = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)
HOUR = Window(T0, T0 + timedelta(hours=1))


def _tips(svg: str) -> list[str]:
    return re.findall(r'data-tip="([^"]*)"', svg)


def test_a_panel_spans_its_whole_window_with_clock_ticks_and_a_round_value_scale() -> None:
    points = [(T0 + timedelta(minutes=50 + i), float(v)) for i, v in enumerate([0, 50, 130, 25])]
    svg = str(time_chart("chart-tokens", [Series("tokens/min", points)], HOUR, "tokens/min", kind="bars"))
    # Data over 4 minutes still draws the hour: ticks every 10 minutes from 08:00 to 09:00, UTC.
    assert re.findall(r'class="chart-label x-tick">([^<]+)<', svg) == [
        f"0{8 + m // 60}:{m % 60:02d}" for m in range(0, 61, 10)
    ]
    assert "UTC" in svg
    assert re.findall(r'class="chart-label y-tick">([^<]+)<', svg) == ["0", "50", "100", "150", "200"]
    assert 'data-top="200"' in svg and svg.count('class="chart-bar') == 3  # a zero minute has no bar
    assert _tips(svg) == ["08:50:00 UTC — 0", "08:51:00 UTC — 50", "08:52:00 UTC — 130", "08:53:00 UTC — 25"]


def test_several_series_share_each_moments_tooltip_and_get_a_legend() -> None:
    at = [T0 + timedelta(minutes=m) for m in (10, 20)]
    series = [Series("gpu-a", [(at[0], 40.0), (at[1], 90.0)]), Series("gpu-b", [(at[1], 10.0)])]
    markup = str(time_chart("chart-gpu-utilization", series, HOUR, "%", top=100))
    assert _tips(markup) == ["08:10:00 UTC — gpu-a 40%", "08:20:00 UTC — gpu-a 90% · gpu-b 10%"]
    assert 'class="chart-legend"' in markup and "gpu-a" in markup and "gpu-b" in markup
    assert re.findall(r'y-tick">([^<]+)<', markup)[-1] == "100%"


def test_an_empty_panel_keeps_its_axes_and_says_there_is_no_data_and_names_are_escaped() -> None:
    svg = str(time_chart('x"><script>', [Series("<b>", [])], HOUR, "u"))
    assert "no data in the last 60 min" in svg and "x-tick" in svg
    assert "<script>" not in svg and "<b>" not in svg


def test_a_sparkline_writes_its_peak_and_window_ends() -> None:
    points = [(T0 + timedelta(minutes=5 * i), v) for i, v in enumerate([0.2, 0.9, 0.4])]
    svg = str(sparkline("spark", "qwen time to first token", [Series("p50", points)], HOUR, "s"))
    assert "max 900 ms" in svg and ">08:00<" in svg and ">now<" in svg
    assert _tips(svg)[1] == "08:05:00 UTC — 900 ms"
    empty = str(sparkline("spark", "qwen time to first token", [], HOUR, "s"))
    assert "no data" in empty and 'aria-label="qwen time to first token (s), last 60 min"' in empty


def test_value_scales_end_on_round_numbers() -> None:
    assert [nice_top(v) for v in (0, 0.3, 1, 7, 11, 26, 130, 999)] == [1, 0.5, 1, 10, 20, 50, 200, 1000]
    assert (value_text(0.25, "s"), value_text(12, "s"), value_text(12.345, "GiB"), value_text(1234, "tokens")) == (
        "250 ms",
        "12.0 s",
        "12.3 GiB",
        "1,234",
    )
    assert [value_text(v, "GiB") for v in (0.25, 0.5, 0.75, 2.5)] == ["0.25 GiB", "0.5 GiB", "0.75 GiB", "2.5 GiB"]


def test_a_chart_of_counts_has_whole_numbers_on_every_gridline() -> None:
    svg = str(
        time_chart("replicas", [Series("warm", [(T0 + timedelta(minutes=30), 1.0)])], HOUR, "replicas", whole=True)
    )
    assert re.findall(r'class="chart-label y-tick">([^<]*)<', svg) == ["0", "1", "2", "3", "4"]


def test_the_tokens_a_minute_card_averages_recent_minutes_so_a_finished_task_does_not_read_zero() -> None:
    now = T0 + timedelta(minutes=10, seconds=20)
    minutes = [(T0 + timedelta(minutes=m), n) for m, n in enumerate([0] * 7 + [500, 0, 0, 0])]
    assert recent_rate(minutes, now) == 100.0  # 500 tokens three minutes ago, over the last five
    assert recent_rate(minutes[:3], now) == 0.0


def _call(step: int, end_s: float, **data: object) -> ModelCallEvent:
    return ModelCallEvent(
        seq=step, task_id="t", at=T0 + timedelta(seconds=end_s), data=ModelCall(step=step, node_id="gpu-a", **data)
    )


def test_the_waterfall_lays_each_steps_phases_back_from_its_settle_and_marks_where_a_node_was_lost() -> None:
    calls = [
        _call(
            1,
            10,
            queue_wait_s=1.0,
            load_s=3.0,
            ttft_s=0.5,
            duration_s=4.0,
            completion_tokens=200,
            tool_calls=["search"],
        ),
        _call(2, 20, queue_wait_s=3.0, ttft_s=0.2, duration_s=2.0, completion_tokens=80, tool_calls=[]),
    ]
    cut = parse_event(
        TaskEvent(
            seq=9,
            task_id="t",
            kind="interruption",
            at=T0 + timedelta(seconds=17.5),
            data={
                "step": 2,
                "node_id": "gpu-a",
                "kind": "preemption",
                "tokens_kept": 40,
                "tokens_lost": 2,
                "resumed_on": "gpu-b",
                "resumed_tier": "warm",
                "resume_s": 1.5,
                "at": (T0 + timedelta(seconds=16)).isoformat(),
            },
        )
    )
    assert isinstance(cut, InterruptionEvent)
    timeline = step_timeline([*calls, cut], T0 + timedelta(seconds=1), T0 + timedelta(seconds=30))
    first, second = timeline.rows
    kinds = [
        (p.kind, round((p.start - T0).total_seconds(), 3), round((p.end - T0).total_seconds(), 3)) for p in first.phases
    ]
    assert kinds == [
        ("queue", 2.0, 3.0),
        ("load", 3.0, 6.0),
        ("ttft", 6.0, 6.5),
        ("generation", 6.5, 10.0),
        ("tools", 10.0, 15.0),
    ]  # the tools run until step 2's queue wait begins
    # No load (a warm replica); its first placement's generation was cut, then it was placed again.
    assert [p.kind for p in second.phases] == ["preempted", "resuming", "queue", "ttft", "generation"]
    assert [(c.step, (c.at - T0).total_seconds()) for c in second.cuts] == [(2, 16.0)]
    assert "resumed on gpu-b (warm) after 1.5 s" in second.cuts[0].tip
    assert timeline.start == T0 + timedelta(seconds=1)
    svg = str(timeline_svg(timeline))
    assert 'data-steps="2"' in svg and svg.count('class="cut hit"') == 1
    assert "step 1 · tools search: 5.0 s" in svg and ">+5 s<" in svg


def test_the_ttft_history_gives_p50_and_p95_per_slice_and_leaves_quiet_slices_out() -> None:
    events = [
        _call(i, 60 * m, ttft_s=v, model="m") for i, (m, v) in enumerate([(1, 0.1), (2, 0.3), (3, 0.2), (40, 2.0)])
    ]
    history = ttft_history(events, HOUR)
    p50, p95 = history["m"]
    assert [v for _, v in p50.points] == [0.2, 2.0] and [v for _, v in p95.points] == [0.3, 2.0]
    assert [(at - T0).total_seconds() / 60 for at, _ in p50.points] == [2.5, 42.5]
