"""What the attacker tests share: the cluster join token, a sync transport for node books, the error shape."""

from __future__ import annotations

import asyncio

import httpx

JOIN_TOKEN = "join-security-6b1f"


class SyncAsgi(httpx.BaseTransport):
    """The app in-process for a synchronous client (a node's step books): each request runs in a fresh loop."""

    def __init__(self, app) -> None:
        self._asgi = httpx.ASGITransport(app)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        async def run() -> httpx.Response:
            replay = httpx.Request(request.method, request.url, headers=request.headers, content=request.read())
            response = await self._asgi.handle_async_request(replay)
            return httpx.Response(response.status_code, headers=response.headers, content=await response.aread())

        return asyncio.run(run())


def error_of(response: httpx.Response) -> dict:
    body = response.json()
    assert set(body) >= {"error"}, body
    assert set(body["error"]) == {"code", "message", "field"}, body
    return body["error"]
