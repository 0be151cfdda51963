"""HTTP probes shared by every engine: vLLM, SGLang, TGI, llama.cpp and the simulator all serve /v1/models."""

from __future__ import annotations

import httpx

# A probe runs on the node agent's loop every few seconds; a server that takes longer than this
# to list its models is not ready to serve a step's first token either.
PROBE_TIMEOUT_S = 2.0


async def serves_model(base_url: str, model: str, timeout_s: float = PROBE_TIMEOUT_S) -> bool:
    """True when GET {base_url}/models answers 200 with `model` among its ids."""
    try:
        async with httpx.AsyncClient(timeout=timeout_s) as client:
            response = await client.get(f"{base_url.rstrip('/')}/models")
        if response.status_code != 200:
            return False
        return any(item.get("id") == model for item in response.json().get("data", []))
    except (httpx.HTTPError, ValueError, AttributeError):
        return False  # refused, timed out, or not an OpenAI model list: not ready yet


async def answers(base_url: str, timeout_s: float = PROBE_TIMEOUT_S) -> bool:
    """True when the server answers HTTP at all (any status): it is up, if not necessarily ready."""
    try:
        async with httpx.AsyncClient(timeout=timeout_s) as client:
            await client.get(f"{base_url.rstrip('/')}/models")
        return True
    except httpx.HTTPError:
        return False


def v1_url(url: str) -> str:
    """`url` with a trailing /v1, as litellm's hosted_vllm route and OpenAI clients expect."""
    url = url.rstrip("/")
    return url if url.endswith("/v1") else f"{url}/v1"
