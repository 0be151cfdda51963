"""Berth's HTTP API (FastAPI): tasks, agents, checkpoints, events, health."""

from .app import build_app, create_app
from .temporal_gateway import TemporalGateway, TemporalUnavailable, UpdateRejected, WorkflowGone

__all__ = ["TemporalGateway", "TemporalUnavailable", "UpdateRejected", "WorkflowGone", "build_app", "create_app"]
