"""The admin UI's pure parts: charts, the tool-call list of a conversation, replica sampling, idle timers."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from orchestrator.ui.charts import Series, line_chart
from orchestrator.ui.pages import _idle_timer
from orchestrator.ui.session_auth import safe_next
from orchestrator.ui.task_view import tool_calls_of
from sdk import Message, ScalingPolicy, ToolCall
from sdk._fleet import ReplicaView

T0 = datetime(2026, 11, 30, 8, 0, tzinfo=timezone.utc)


def test_a_chart_scales_its_line_to_the_box_and_names_latest_and_peak() -> None:
    points = [(T0 + timedelta(minutes=i), float(v)) for i, v in enumerate([0, 50, 100, 25])]
    svg = str(line_chart("chart-tokens", Series("tokens per minute", "tokens/min", points)))
    assert svg.startswith('<svg class="chart" id="chart-tokens"')
    assert 'data-latest="25" data-peak="100" data-points="4"' in svg
    assert "tokens per minute: 25 tokens/min now, peak 100" in svg and "last 3 min" in svg
    coordinates = svg.split(' points="')[1].split('"')[0].split()
    assert coordinates[0] == "6.0,114.0" and coordinates[2].endswith(",6.0")  # zero at the bottom, peak at the top


def test_an_empty_chart_says_so_and_names_are_escaped() -> None:
    svg = str(line_chart('x"><script>', Series("<b>", "u", [])))
    assert "no data yet" in svg and "<script>" not in svg and "<b>" not in svg


def test_tool_calls_are_numbered_by_step_with_their_answers() -> None:
    messages = [
        Message(role="user", content="go"),
        Message(role="assistant", tool_calls=[ToolCall(id="a", name="search", arguments='{"q": 1}'),
                                              ToolCall(id="b", name="note", arguments="{}")]),
        Message(role="tool", tool_call_id="a", content="found"),
        Message(role="assistant", tool_calls=[ToolCall(id="c", name="search", arguments="{}")]),
    ]
    calls = tool_calls_of(messages)
    assert [(c.step, c.name, c.result) for c in calls] == [(1, "search", "found"), (1, "note", None), (2, "search", None)]


def test_an_idle_replica_shows_how_long_until_the_scaler_unloads_it() -> None:
    replica = ReplicaView(replica_id="r1", node_id="n1", datacenter="d", zone="z", model="m", gpu_indexes=[0],
                          state="warm", active_leases=0, updated_at=T0)
    policy = ScalingPolicy(idle_timeout_s=300)
    assert _idle_timer(replica, T0 + timedelta(seconds=60), policy, T0 + timedelta(seconds=100)) == \
        "idle 40 s (unloads in ~4 min)"
    assert _idle_timer(replica, None, policy, T0 + timedelta(seconds=400)) == "idle 7 min (due to unload)"
    busy = replica.model_copy(update={"active_leases": 1})
    assert _idle_timer(busy, None, policy, T0) == ""


def test_only_local_paths_are_followed_after_signing_in() -> None:
    assert safe_next("/tasks?status=running") == "/tasks?status=running"
    for bad in (None, "", "//evil.example", "https://evil.example", "/\\evil", "tasks"):
        assert safe_next(bad) == "/"
