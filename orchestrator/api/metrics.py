"""`GET /metrics`: the control plane's metrics in the Prometheus text format, for a scraper.

Outside /v1, but behind an API key like /v1: the figures name every tenant with its tokens and spend, so a
scraper holds a key that may read every tenant (any role, confined to no tenant and no task; a viewer key is
enough), sent as Prometheus's bearer token. Left out of the OpenAPI schema, which describes JSON routes.
"""

from __future__ import annotations

import asyncio

from fastapi import APIRouter
from fastapi.responses import Response

from ..telemetry.metrics_setup import METRICS_CONTENT_TYPE, metrics_text
from .auth import Caller
from .errors import ApiError

router = APIRouter()


@router.get("/metrics", include_in_schema=False)
async def prometheus_metrics(caller: Caller) -> Response:
    if caller.tenant is not None or caller.task_id is not None:
        confined = f"task {caller.task_id}" if caller.task_id is not None else f"tenant {caller.tenant}"
        raise ApiError(
            403,
            f"API key {caller.key_id} is confined to {confined}, and /metrics names every tenant:"
            " scrape with a key of no tenant (a viewer key is enough)",
            field="authorization",
        )
    # In a thread: the fleet gauges read the store while the text is built.
    return Response(await asyncio.to_thread(metrics_text), media_type=METRICS_CONTENT_TYPE)
