"""`GET /metrics` on the control-plane app (read with a key of no tenant): Prometheus text, with the per-model
step histograms a booked call adds. The call is booked through StoreStepBooks, the path both the worker and the
nodes' settle route take; no Temporal is needed, so the gateway points at a closed port."""

from __future__ import annotations

import httpx
import pytest
from api_helpers import unique
from prometheus_client.parser import text_string_to_metric_families

from activities.step.store_books import StoreStepBooks
from orchestrator.api import TemporalGateway
from orchestrator.store import Store
from sdk.wire.identity import Role
from sdk.wire.step_call import CallReport, StepRef


@pytest.fixture
def gateway(closed_port: int) -> TemporalGateway:
    return TemporalGateway(f"127.0.0.1:{closed_port}")


async def test_metrics_serve_the_per_model_ttft_histogram_after_a_booked_call(
    app, store: Store, metrics_reader
) -> None:
    model = unique("metered-model")
    books = StoreStepBooks(store.checkpoints, store.tasks, store.events, store.ledger)
    step = StepRef("t-metrics", 1, model, "acme")
    call = CallReport(
        attempt=1,
        prompt_tokens=30,
        completion_tokens=12,
        cost_usd=0.0015,
        ttft_s=0.07,
        duration_s=0.3,
        served_by="gpu-1/r-1",
    )
    assert books.settle(step, call).recorded
    assert not books.settle(step, call).recorded  # a retried settle counts once

    scraper = store.keys.create(Role.viewer, name="prometheus").key  # a key of no tenant: /metrics names them all
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app), base_url="http://berth", headers={"authorization": f"Bearer {scraper}"}
    ) as http:
        response = await http.get("/metrics")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(response.text)}

    ttft = families["berth_step_ttft_seconds"]
    assert ttft.type == "histogram"
    mine = {s.name: s.value for s in ttft.samples if s.labels.get("model") == model and "le" not in s.labels}
    assert mine == {"berth_step_ttft_seconds_count": 1.0, "berth_step_ttft_seconds_sum": pytest.approx(0.07)}
    tokens = {
        (s.labels["kind"], s.labels["tenant"]): s.value
        for s in families["berth_tokens_used"].samples
        if s.labels.get("model") == model and s.name == "berth_tokens_used_total"
    }
    assert tokens == {("prompt", "acme"): 30, ("completion", "acme"): 12}
    assert any(s.labels.get("tenant") == "acme" for s in families["berth_cost_usd"].samples)


async def test_metrics_are_not_in_the_openapi_schema(app) -> None:
    assert "/metrics" not in app.openapi()["paths"]
