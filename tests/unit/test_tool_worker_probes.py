"""`berth worker --agents` answers a container platform's probes on BERTH_WORKER_METRICS_PORT, as the orchestrator
worker does: /healthz while the process answers, /readyz once its agents are registered and their tools served."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import httpx
import pytest

from orchestrator.cli import tool_worker
from orchestrator.config import BerthConfig


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_tool_worker_is_ready_once_its_agents_are_served(monkeypatch: pytest.MonkeyPatch) -> None:
    port = free_port()
    monkeypatch.setenv("BERTH_WORKER_METRICS_PORT", str(port))
    seen: dict[str, int] = {}

    async def serve(*agents: object, ready: asyncio.Event, **kwargs: Any) -> None:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            seen["live"] = (await http.get("/healthz")).status_code
            seen["before"] = (await http.get("/readyz")).status_code
            ready.set()
            seen["after"] = (await http.get("/readyz")).status_code

    monkeypatch.setattr(tool_worker, "serve", serve)
    config = BerthConfig.model_validate({"host": "127.0.0.1"})
    assert tool_worker.run_tool_worker(config, ["orchestrator.demo.sample_agents:ALL"]) == 0
    assert seen == {"live": 200, "before": 503, "after": 200}
    with pytest.raises(httpx.ConnectError):  # closed with the process's work
        httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2)
