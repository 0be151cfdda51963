"""Berth's HTTP API (FastAPI routers): tasks, agents, checkpoints, events, health, and the routes nodes call.
The app that serves them, with the UI and MCP beside them, is composed in `orchestrator.server`."""

from .temporal_gateway import TemporalGateway, TemporalUnavailable, UpdateRejected, WorkflowGone

__all__ = ["TemporalGateway", "TemporalUnavailable", "UpdateRejected", "WorkflowGone"]
