"""Berth as an MCP tool server: one definition of the tools and resources, two transports.

`berth mcp` serves them over stdio with the key it was started with (`stdio.py`); the
control-plane app serves them over streamable HTTP at `/mcp` with each request's own key
(`http.py`, imported by the app itself: `berth mcp` never loads the store or the HTTP stack). Either way every call goes through the SDK `Client` to /v1, so the API's
roles, tenant scoping, budget rules and audit trail apply to an MCP caller unchanged.
"""

from .server import build_server
from .stdio import serve_stdio

__all__ = ["build_server", "serve_stdio"]
