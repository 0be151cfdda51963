"""`GET /metrics`: the control plane's metrics in the Prometheus text format, for a scraper.

Outside /v1 and without a key, like /healthz: a scraper holds no Berth key, and the figures name
models, tenants and nodes, never tasks. Left out of the OpenAPI schema, which describes JSON routes.
"""

from __future__ import annotations

import asyncio

from fastapi import APIRouter
from fastapi.responses import Response

from ..telemetry.metrics_setup import METRICS_CONTENT_TYPE, metrics_text

router = APIRouter()


@router.get("/metrics", include_in_schema=False)
async def prometheus_metrics() -> Response:
    # In a thread: the fleet gauges read the store while the text is built.
    return Response(await asyncio.to_thread(metrics_text), media_type=METRICS_CONTENT_TYPE)
