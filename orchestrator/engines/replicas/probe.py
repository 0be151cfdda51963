"""HTTP probes shared by every engine: vLLM, SGLang, TGI, llama.cpp and the simulator all serve /v1/models."""

from __future__ import annotations

import asyncio
import weakref

import httpx

# A probe runs on the node agent's loop every few seconds; a server that takes longer than this
# to list its models is not ready to serve a step's first token either.
PROBE_TIMEOUT_S = 2.0
# Under the 5 s keep-alive of the servers probed (uvicorn's, vLLM's): a connection the server is closing
# as a probe reuses it would read as a replica gone (`answers` is an external replica's liveness).
KEEPALIVE_S = 2.0

# One client per event loop, made on the first probe: building an httpx client builds an SSL context (tens
# of ms of CPU), which at one client per probe every 0.25 s of a replica's load was a third of a loaded node
# agent's CPU. Per loop, because a client's connections belong to the loop that opened them; a loop that is
# gone takes its client with it.
_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = weakref.WeakKeyDictionary()


def _client() -> httpx.AsyncClient:
    loop = asyncio.get_running_loop()
    client = _clients.get(loop)
    if client is None or client.is_closed:
        client = _clients[loop] = httpx.AsyncClient(limits=httpx.Limits(keepalive_expiry=KEEPALIVE_S))
    return client


async def serves_model(base_url: str, model: str, timeout_s: float = PROBE_TIMEOUT_S) -> bool:
    """True when GET {base_url}/models answers 200 with `model` among its ids."""
    try:
        response = await _client().get(f"{base_url.rstrip('/')}/models", timeout=timeout_s)
        if response.status_code != 200:
            return False
        return any(item.get("id") == model for item in response.json().get("data", []))
    except (httpx.HTTPError, ValueError, AttributeError):
        return False  # refused, timed out, or not an OpenAI model list: not ready yet


async def answers(base_url: str, timeout_s: float = PROBE_TIMEOUT_S) -> bool:
    """True when the server answers HTTP at all (any status): it is up, if not necessarily ready."""
    try:
        await _client().get(f"{base_url.rstrip('/')}/models", timeout=timeout_s)
        return True
    except httpx.HTTPError:
        return False


def v1_url(url: str) -> str:
    """`url` with a trailing /v1, as litellm's hosted_vllm route and OpenAI clients expect."""
    url = url.rstrip("/")
    return url if url.endswith("/v1") else f"{url}/v1"
