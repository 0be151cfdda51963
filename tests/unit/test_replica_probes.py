"""The readiness and liveness probes every engine's replicas are polled with, against a real HTTP server."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest

from orchestrator.engines.replicas import probe
from tests.conftest import free_port


class ModelList:
    """A minimal keep-alive HTTP server answering every request with an OpenAI model list; counts connections."""

    def __init__(self, models: list[str]) -> None:
        body = json.dumps({"object": "list", "data": [{"id": m, "object": "model"} for m in models]}).encode()
        self.response = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (
            len(body),
            body,
        )
        self.connections = 0

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while await reader.readuntil(b"\r\n\r\n"):
                writer.write(self.response)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@pytest.fixture
async def engine() -> AsyncIterator[tuple[str, ModelList]]:
    server = ModelList(["llama-3.2-1b"])
    listening = await asyncio.start_server(server.serve, "127.0.0.1", 0)
    port = listening.sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}/v1", server
    listening.close()


async def test_a_replica_is_ready_when_it_lists_the_model(engine: tuple[str, ModelList]) -> None:
    url, _ = engine
    assert await probe.serves_model(url, "llama-3.2-1b")
    assert not await probe.serves_model(url, "llama-3.1-8b")
    assert await probe.answers(url)
    closed = f"http://127.0.0.1:{free_port()}/v1"
    assert not await probe.serves_model(closed, "llama-3.2-1b") and not await probe.answers(closed)


async def test_probes_on_one_loop_share_one_client_and_its_connection(engine: tuple[str, ModelList]) -> None:
    """A loading replica is probed every 0.25 s: a client (and its SSL context) per probe cost a third of a
    node agent's CPU, and a connection per probe costs the engine an accept."""
    url, server = engine
    for _ in range(5):
        assert await probe.serves_model(url, "llama-3.2-1b")
    assert server.connections == 1
