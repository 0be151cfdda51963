"""`berth server`: the API under uvicorn."""

from __future__ import annotations

import uvicorn

from ..config import BerthConfig
from .app import build_app


def run_server(config: BerthConfig) -> None:
    uvicorn.run(build_app(config), host=config.host, port=config.api_port, log_level="info")
