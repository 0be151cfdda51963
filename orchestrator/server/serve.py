"""`berth server`: the API under uvicorn."""

from __future__ import annotations

import sys

import uvicorn

from ..api.admin_key import AdminKeyRefused
from ..config import BerthConfig, TemporalSettingsRefused
from ..telemetry.tracing import configure_tracing
from .app import build_app


def run_server(config: BerthConfig) -> int:
    """Serve until stopped: 0. A BERTH_ADMIN_KEY or BERTH_TEMPORAL_* setting that cannot be used stops it before
    it listens: 2."""
    configure_tracing("berth-api")
    try:
        app = build_app(config)
    except (AdminKeyRefused, TemporalSettingsRefused) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    uvicorn.run(app, host=config.host, port=config.api_port, log_level="info")
    return 0
