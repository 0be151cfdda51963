"""The console's fleet charts read their history from the store (issue 35, part 4): one sample per 15-second bucket
whichever control-plane replica took it, the same samples after a restart and on every replica, kept a day, and
read over a window the page chooses (15 min to 24 h, a name not offered refused by the parameter's name)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from orchestrator.api.errors import ApiError
from orchestrator.store import Store
from orchestrator.store.fleet_samples import KEPT_FOR, SAMPLE_EVERY_S, FleetSample, NodeGpus
from orchestrator.ui.charts import Window
from orchestrator.ui.fleet_history import MAX_POINTS, WINDOWS, FleetCharts, FleetHistory, chart_window

NOW = datetime.now(UTC).replace(microsecond=0)


def _sample(at: datetime, busy: float = 73.0, warm: int = 2) -> FleetSample:
    return FleetSample(at, {"warm": warm, "loading": 1}, {"gpu-a": NodeGpus(40.5, 80.0, busy)})


pytestmark = pytest.mark.postgresql  # the bucket's insert-or-skip is dialect SQL: both databases run it


def test_two_replicas_sampling_the_same_bucket_keep_one_sample_and_read_the_same(db_url: str) -> None:
    a, b = Store.open(db_url), Store.open(db_url)
    first, second = FleetHistory(a), FleetHistory(b)
    bucket_start = datetime.fromtimestamp(NOW.timestamp() // SAMPLE_EVERY_S * SAMPLE_EVERY_S, UTC)
    assert first.samples.record(_sample(bucket_start + timedelta(seconds=1), busy=73.0))
    assert not second.samples.record(_sample(bucket_start + timedelta(seconds=9), busy=10.0))  # the same bucket
    assert second.samples.record(_sample(bucket_start + timedelta(seconds=SAMPLE_EVERY_S), busy=50.0))
    window = Window.last(timedelta(minutes=15), bucket_start + timedelta(minutes=1))
    seen = [FleetHistory(s).charts(window).gpu_utilization() for s in (a, b)]
    assert seen[0] == seen[1]
    [node] = seen[0]
    assert node.name == "gpu-a" and [v for _, v in node.points] == [73.0, 50.0]
    assert first.latest() == second.latest()
    a.close()
    b.close()


def test_the_samples_survive_a_restart_and_are_kept_a_day(db_url: str) -> None:
    store = Store.open(db_url)
    history = FleetHistory(store)
    assert history.sample()  # from the fleet tables (none here): a sample all the same
    store.fleet_samples.record(_sample(NOW - KEPT_FOR - timedelta(minutes=5)))
    store.fleet_samples.record(_sample(NOW - timedelta(hours=3), warm=4))
    store.fleet_samples.record(_sample(NOW - timedelta(minutes=1), warm=5))  # its writer drops what is past a day
    store.close()

    restarted = Store.open(db_url)
    charts = FleetHistory(restarted).charts(chart_window("24h", NOW))
    warm = charts.replicas()[0]
    assert [v for _, v in warm.points][-2:] == [4.0, 5.0]
    everything = restarted.fleet_samples.between(NOW - timedelta(days=3), NOW)
    assert min(s.at for s in everything) >= NOW - KEPT_FOR
    assert [v for _, v in FleetHistory(restarted).charts(chart_window("15m", NOW)).replicas()[0].points] == [5.0]
    restarted.close()


def test_a_window_is_one_the_charts_offer_or_refused_by_the_parameters_name() -> None:
    assert {name: chart_window(name, NOW).end - chart_window(name, NOW).start for name in WINDOWS} == WINDOWS
    for wrong in ("7d", "", "1H", "60m"):
        with pytest.raises(ApiError) as refused:
            chart_window(wrong, NOW)
        assert refused.value.status == 422 and refused.value.field == "window"
        assert refused.value.message.startswith("window: ") and "15m, 1h, 6h, 24h" in refused.value.message


def test_a_long_window_is_averaged_into_few_points_and_says_so() -> None:
    day = chart_window("24h", NOW)
    samples = [_sample(day.start + timedelta(seconds=SAMPLE_EVERY_S * i), busy=i % 2 * 100.0) for i in range(5760)]
    charts = FleetCharts(samples, day)
    [busy] = charts.gpu_utilization()
    assert len(busy.points) <= MAX_POINTS and all(v == 50.0 for _, v in busy.points)
    assert charts.averaged == "mean per 6 min"
    hour = FleetCharts(samples[-240:], chart_window("1h", samples[-1].at))
    assert hour.averaged == "" and len(hour.gpu_utilization()[0].points) == 240
