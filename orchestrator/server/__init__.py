"""`berth server`: the control plane's one HTTP app, composed of the API (`orchestrator.api`), the admin UI
(`orchestrator.ui`) and the MCP server (`orchestrator.mcp_server`), and run under uvicorn."""

from .app import build_app, create_app

__all__ = ["build_app", "create_app"]
