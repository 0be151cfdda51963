"""`berth server`: the API under uvicorn."""

from __future__ import annotations

import uvicorn

from ..config import BerthConfig
from ..telemetry.tracing import configure_tracing
from .app import build_app


def run_server(config: BerthConfig) -> None:
    configure_tracing("berth-api")
    uvicorn.run(build_app(config), host=config.host, port=config.api_port, log_level="info")
