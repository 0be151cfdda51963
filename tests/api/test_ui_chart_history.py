"""The console's charts over HTTP, in-process (issue 35, part 4): two API processes on one store (two replicas,
or one restarted) draw the same history from the store's samples, over the window the page asks for; a window not
offered is refused, naming the parameter."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from ui_helpers import csrf_of

from orchestrator.config import BerthConfig
from orchestrator.server import create_app
from orchestrator.store import Store
from orchestrator.store.fleet_samples import SAMPLE_EVERY_S, FleetSample, NodeGpus
from sdk.wire.identity import Role


@pytest.fixture
async def two_replicas(config: BerthConfig, store: Store, app, gateway) -> AsyncIterator[list[httpx.AsyncClient]]:
    """Browsers signed in to two apps, each with its own store on the same database: what two API replicas are,
    and what one API is before and after a restart."""
    other = Store.open(config.resolved_database_url)
    key = store.keys.create(Role.viewer, name="charts").key
    browsers = []
    for each in (app, create_app(config, other, gateway)):
        browser = httpx.AsyncClient(transport=httpx.ASGITransport(each), base_url="http://berth")
        form = await browser.get("/login")
        signed = await browser.post("/login", data={"api_key": key, "csrf_token": csrf_of(form)})
        assert signed.status_code == 303
        browsers.append(browser)
    yield browsers
    for browser in browsers:
        await browser.aclose()
    other.close()


def _points(page: str, chart: str) -> int:
    found = re.search(rf'<svg class="chart" id="{chart}"[^>]* data-points="(\d+)"', page)
    assert found, page[:500]
    return int(found.group(1))


async def test_two_api_processes_on_one_store_draw_the_same_history_over_the_chosen_window(
    store: Store, app, two_replicas: list[httpx.AsyncClient]
) -> None:
    now = datetime.now(UTC)
    # Samples over the last five hours, as the replicas' samplers wrote them (one per bucket).
    for minutes in range(0, 300, 5):
        at = now - timedelta(minutes=minutes, seconds=SAMPLE_EVERY_S)
        store.fleet_samples.record(FleetSample(at, {"warm": 1}, {"gpu-a": NodeGpus(20.0, 80.0, 60.0)}))
    pages = {
        (i, window): (await browser.get(f"/?window={window}")).text
        for i, browser in enumerate(two_replicas)
        for window in ("15m", "6h")
    }
    for window in ("15m", "6h"):
        a, b = pages[(0, window)], pages[(1, window)]
        for chart in ("chart-gpu-utilization", "chart-replicas", "chart-gpu-memory"):
            assert _points(a, chart) == _points(b, chart) > 0, (window, chart)
    assert (
        _points(pages[(0, "6h")], "chart-gpu-utilization") == 60 > _points(pages[(0, "15m")], "chart-gpu-utilization")
    )
    assert 'data-window="6h" aria-current="true"' in pages[(1, "6h")]
    assert 'data-panel="/panels/overview?window=6h"' in pages[(1, "6h")]
    assert "last 6 h" in pages[(1, "6h")] and "60%" in pages[(1, "6h")]
    panel = await two_replicas[1].get("/panels/overview?window=6h")
    assert panel.status_code == 200 and _points(panel.text, "chart-gpu-utilization") == 60
    fleet = await two_replicas[1].get("/fleet?window=24h")
    assert fleet.status_code == 200 and 'data-window="24h" aria-current="true"' in fleet.text


@pytest.mark.parametrize("path", ["/", "/fleet", "/models", "/panels/overview", "/panels/fleet"])
async def test_a_window_not_offered_is_refused_naming_the_parameter(
    path: str, two_replicas: list[httpx.AsyncClient]
) -> None:
    refused = await two_replicas[0].get(f"{path}?window=7d")
    assert refused.status_code == 422, refused.text[:300]
    assert "window: &#39;7d&#39; is not one of 15m, 1h, 6h, 24h" in refused.text
