"""The admin UI's parts below the pages (charts: test_ui_charts): the tool-call list of a conversation, idle timers, the overview's figures."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from orchestrator.config import BerthConfig
from orchestrator.store import Store
from orchestrator.ui.fleet_pages import _idle_timer
from orchestrator.ui.foresight import foresight_view, unload_window
from orchestrator.ui.overview import models_last_hour, overview
from orchestrator.ui.pages import workflow_url
from orchestrator.ui.session_auth import safe_next
from orchestrator.ui.task_view import tool_calls_of
from sdk import CatalogueModel, Message, ModelEntry, ScalingPolicy, Spend, TaskState, TaskStatus, ToolCall
from sdk.wire.catalogue import KeepAliveView, ModelForesight, PrewarmView
from sdk.wire.fleet import ReplicaView

T0 = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)


def test_tool_calls_are_numbered_by_step_with_their_answers() -> None:
    messages = [
        Message(role="user", content="go"),
        Message(
            role="assistant",
            tool_calls=[
                ToolCall(id="a", name="search", arguments='{"q": 1}'),
                ToolCall(id="b", name="note", arguments="{}"),
            ],
        ),
        Message(role="tool", tool_call_id="a", content="found"),
        Message(role="assistant", tool_calls=[ToolCall(id="c", name="search", arguments="{}")]),
    ]
    calls = tool_calls_of(messages)
    assert [(c.step, c.name, c.result) for c in calls] == [
        (1, "search", "found"),
        (1, "note", None),
        (2, "search", None),
    ]


def _model(policy: ScalingPolicy, foresight: ModelForesight | None = None) -> CatalogueModel:
    return CatalogueModel(entry=ModelEntry(name="m", weights_gib=16), policy=policy, foresight=foresight)


def _learned(window_s: float, source: str = "learned", prewarms: list[PrewarmView] | None = None) -> ModelForesight:
    return ModelForesight(
        keep_alive=[
            KeepAliveView(level=2, window_s=60, prewarm_s=0, source="learned", gaps=30),
            KeepAliveView(level=1, window_s=window_s, prewarm_s=0, source=source, gaps=254),
        ],
        prewarms=prewarms or [],
        announced=3,
        intent_gpu_hours_last_hour=0.4166,
        updated_at=T0,
    )


def test_an_idle_replica_shows_how_long_until_the_scaler_unloads_it() -> None:
    replica = ReplicaView(
        replica_id="r1",
        node_id="n1",
        datacenter="d",
        zone="z",
        model="m",
        gpu_indexes=[0],
        state="warm",
        active_leases=0,
        updated_at=T0,
    )
    fixed = _model(ScalingPolicy(idle_timeout_s=300), _learned(720))  # the operator's window wins
    assert (
        _idle_timer(replica, T0 + timedelta(seconds=60), fixed, T0 + timedelta(seconds=100))
        == "idle 40 s (unloads in ~4 min)"
    )
    assert _idle_timer(replica, None, fixed, T0 + timedelta(seconds=400)) == "idle 7 min (due to unload)"
    busy = replica.model_copy(update={"active_leases": 1})
    assert _idle_timer(busy, None, fixed, T0) == ""


def test_without_a_fixed_timeout_the_idle_timer_counts_down_the_learned_first_level_window() -> None:
    replica = ReplicaView(
        replica_id="r1",
        node_id="n1",
        datacenter="d",
        zone="z",
        model="m",
        gpu_indexes=[0],
        state="warm",
        active_leases=0,
        updated_at=T0,
    )
    learned = _model(ScalingPolicy(), _learned(720))  # level 1: 12 min; level 2's 60 s is not the first replica's
    assert unload_window(learned) == (720, "learned")
    assert (
        _idle_timer(replica, None, learned, T0 + timedelta(seconds=120))
        == "idle 2 min (unloads in ~10 min, learned window)"
    )
    assert (
        _idle_timer(replica, None, _model(ScalingPolicy(), _learned(200, "break-even")), T0 + timedelta(seconds=300))
        == "idle 5 min (due to unload, break-even window)"
    )
    unplanned = _model(ScalingPolicy())
    assert unload_window(unplanned) is None
    assert (
        _idle_timer(replica, None, unplanned, T0 + timedelta(seconds=30)) == "idle 30 s (idle window not learned yet)"
    )


def test_the_models_page_words_each_levels_window_and_whether_each_prewarm_was_used() -> None:
    prewarms = [
        PrewarmView(replica_id="r-used", started_at=T0, reason="2 announced steps", used_at=T0 + timedelta(seconds=80)),
        PrewarmView(
            replica_id="r-wasted", started_at=T0, reason="level 2 pre-warm", ended_at=T0 + timedelta(minutes=15)
        ),
        PrewarmView(replica_id="r-waiting", started_at=T0, reason="1 announced step"),
    ]
    foresight = _learned(720, prewarms=prewarms)
    foresight.keep_alive.append(KeepAliveView(level=3, window_s=2400, prewarm_s=900, source="learned", gaps=1))
    foresight.keep_alive.append(KeepAliveView(level=4, window_s=180, prewarm_s=0, source="break-even", gaps=3))
    view = foresight_view(_model(ScalingPolicy(intent_gpu_hours_per_hour=0), foresight))
    assert view is not None
    assert [(k.level, k.kept, k.prewarm, k.why) for k in view.levels] == [
        (1, "12 min idle", "–", "learned from 254 idle gaps"),
        (2, "60 s idle", "–", "learned from 30 idle gaps"),
        (3, "unloaded at once, then kept until 40 min idle", "at 15 min idle", "learned from 1 idle gap"),
        (
            4,
            "3 min idle",
            "–",
            "break-even: kept until holding it has cost one cold start (3 idle gaps give no longer window)",
        ),
    ]
    assert [(p.replica_id, p.used, p.used_text) for p in view.prewarms] == [
        ("r-used", "yes", "yes, 80 s after it started"),
        ("r-wasted", "no", "no: ended unused"),
        ("r-waiting", "not-yet", "not yet"),
    ]
    assert (view.announced, view.intent_used, view.intent_allowed) == (3, "0.42", "0")
    assert foresight_view(_model(ScalingPolicy())) is None


def test_only_local_paths_are_followed_after_signing_in() -> None:
    assert safe_next("/tasks?status=running") == "/tasks?status=running"
    for bad in (None, "", "//evil.example", "https://evil.example", "/\\evil", "tasks"):
        assert safe_next(bad) == "/"


def test_the_overview_counts_cold_starts_preemptions_and_waiting_tasks_of_the_callers_tenant(store: Store) -> None:
    for task_id, tenant, status in (
        ("a1", "default", TaskStatus.waiting_for_gpu),
        ("a2", "default", TaskStatus.running),
        ("b1", "acme", TaskStatus.waiting_for_gpu),
    ):
        store.tasks.create(
            task_id,
            "{}",
            TaskState(
                task_id=task_id,
                agent="a",
                agent_version="v",
                model="m-1",
                tenant=tenant,
                status=status,
                max_steps=3,
                spend=Spend(token_limit=10),
                gpu_trouble="capacity",
            ),
        )
    store.events.append("a1", "llm_call", {"model": "m-1", "tier": "origin", "ttft_s": 4.0, "tokens_per_s": 50.0})
    store.events.append("a2", "llm_call", {"model": "m-1", "tier": "warm", "ttft_s": 0.2, "tokens_per_s": 90.0})
    store.events.append("b1", "llm_call", {"model": "m-2", "tier": "disk", "ttft_s": 1.5, "tokens_per_s": None})
    store.events.append("b1", "interruption", {"kind": "notice"})
    mine = overview(store, "default")
    assert (mine.cold_starts_1h, mine.preemptions_1h) == (1, 0)
    assert [t.task_id for t in mine.waiting_for_gpu] == ["a1"]
    assert mine.tasks_by_state["waiting_for_gpu"] == 1 and mine.tasks_by_state["completed"] == 0
    everyone = overview(store, None)
    assert (everyone.cold_starts_1h, everyone.preemptions_1h, len(everyone.waiting_for_gpu)) == (2, 1, 2)
    figures = models_last_hour(store)
    assert {m: (f.calls, f.cold_starts) for m, f in figures.items()} == {"m-1": (2, 1), "m-2": (1, 1)}
    assert (figures["m-1"].ttft_p50_s, figures["m-1"].ttft_p95_s, figures["m-1"].tokens_per_s_p50) == (0.2, 4.0, 50.0)
    assert (figures["m-2"].ttft_p50_s, figures["m-2"].tokens_per_s_p50) == (1.5, None)


def test_a_task_links_to_its_workflow_in_the_temporal_ui_berth_knows() -> None:
    embedded = BerthConfig(host="127.0.0.1", temporal_ui_port=8233)
    assert workflow_url(embedded, "acme:t/1") == "http://127.0.0.1:8233/namespaces/default/workflows/acme%3At%2F1"
    told = BerthConfig(
        temporal_address="temporal.internal:7233",
        temporal_namespace="prod ns",
        temporal_ui_url="https://temporal.example/",
    )
    assert workflow_url(told, "t") == "https://temporal.example/namespaces/prod%20ns/workflows/t"
    # An outside Temporal whose UI Berth was not told of: no link rather than one to a UI that is not there.
    assert workflow_url(BerthConfig(temporal_address="temporal.internal:7233"), "t") is None
    # Only a web address becomes the link: a page's link never runs a script.
    with pytest.raises(ValidationError, match="temporal_ui_url"):
        BerthConfig(temporal_ui_url="javascript:alert(1)")
