"""MCP over streamable HTTP at /mcp on the control-plane app, behind the same API keys as /v1.

`KeyGate` checks every request's bearer key against the store before MCP sees a byte of it
(401 with `WWW-Authenticate: Bearer` otherwise, as /v1 answers) and leaves the key in a
context variable: the MCP SDK runs each message's handler in the context of the HTTP request
that carried it, so a tool reads the key of the request that called it. The tools then call
/v1 in-process through `httpx.ASGITransport(app)`, with that key: the app's own middleware
(audit trail, body limit) and every route rule see an MCP call as the caller's own request.
mcp's OAuth machinery (AuthSettings) is not used: it wants issuer URLs, and Berth's keys are
not OAuth tokens.

The session manager is stateless: each POST stands alone, so the API can run as several
replicas behind a load balancer without sticky sessions, and no session can be taken over by
another key. Progress notifications still reach the client, on the POST's own SSE answer.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from contextvars import ContextVar

import httpx
from fastapi import FastAPI
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Receive, Scope, Send

from sdk import Client, Unauthorized

from ..store import Store
from .server import build_server

PATH = "/mcp"
# The in-process base URL the tools' Clients use; it never leaves the process.
IN_PROCESS_URL = "http://berth"
# Every request carries a bearer key that a browser would not attach on its own, so a DNS-rebinding
# page gains nothing; the Host check would only refuse deployments reached by another name.
_NO_HOST_CHECK = TransportSecuritySettings(enable_dns_rebinding_protection=False)

_caller_key: ContextVar[str] = ContextVar("berth_mcp_caller_key")


class KeyGate:
    """Lets through only requests with a valid, unrevoked API key, remembering the key for the tools."""

    def __init__(self, app: ASGIApp, store: Store) -> None:
        self.app = app
        self.store = store

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        key = _bearer(scope)
        if key is None:
            await _refuse(send, "an API key is required: send `Authorization: Bearer <key>`")
            return
        try:
            await run_in_threadpool(self.store.keys.authenticate, key)
        except Unauthorized as exc:
            await _refuse(send, exc.message)
            return
        token = _caller_key.set(key)
        try:
            await self.app(scope, receive, send)
        finally:
            _caller_key.reset(token)


def _bearer(scope: Scope) -> str | None:
    for name, value in scope.get("headers", []):
        if name == b"authorization":
            scheme, _, key = value.decode("latin-1").partition(" ")
            if scheme.lower() != "bearer":
                return None
            return key.strip() or None
    return None


async def _refuse(send: Send, message: str) -> None:
    """The 401 of /v1, in its error shape."""
    body = json.dumps({"error": {"code": "unauthorized", "message": message, "field": "authorization"}}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 401,
            "headers": [
                (b"content-type", b"application/json"),
                (b"www-authenticate", b"Bearer"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class McpEndpoint:
    """The /mcp route's session manager, which must run for as long as the app serves."""

    def __init__(self, manager: StreamableHTTPSessionManager) -> None:
        self._manager = manager

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        async with self._manager.run():
            yield


def mount(app: FastAPI, store: Store) -> McpEndpoint:
    """Serve the tools at /mcp on `app` (kept out of its OpenAPI schema); run `.running()` in its lifespan."""

    @asynccontextmanager
    async def caller_client() -> AsyncIterator[Client]:
        async with Client(IN_PROCESS_URL, _caller_key.get(), transport=httpx.ASGITransport(app)) as client:
            yield client

    server = build_server(caller_client)
    # streamable_http_app() is how MCPServer makes its session manager; its Starlette app is not used,
    # the manager's handler is routed here directly.
    server.streamable_http_app(stateless_http=True, transport_security=_NO_HOST_CHECK)
    manager = server.session_manager
    gate = KeyGate(manager.handle_request, store)
    # Starlette's Route serves an endpoint that is no function as an ASGI app, as is; add_route's stub names only
    # request handlers. add_route, not routes.append: FastAPI counts the change (its route cache).
    app.router.add_route(PATH, gate, include_in_schema=False)  # type: ignore[arg-type]  # an ASGI app is a valid endpoint
    return McpEndpoint(manager)
