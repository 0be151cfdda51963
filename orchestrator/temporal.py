"""One way to reach Temporal, so every process uses the pydantic converter and the same retry."""

from __future__ import annotations

import asyncio

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from .config import BerthConfig
from .telemetry.tracing import tracing_interceptor


async def connect_temporal(config: BerthConfig, attempts: int = 60, delay_s: float = 1.0) -> Client:
    """Connect, waiting for a frontend that is still starting (as under `berth up`)."""
    last: Exception | None = None
    for _ in range(attempts):
        try:
            return await Client.connect(
                config.resolved_temporal_address,
                namespace=config.temporal_namespace,
                data_converter=pydantic_data_converter,
                interceptors=[tracing_interceptor()],
            )
        except Exception as exc:  # the SDK raises RuntimeError for an unreachable frontend
            last = exc
            await asyncio.sleep(delay_s)
    raise ConnectionError(f"Temporal at {config.resolved_temporal_address} did not answer: {last}")
