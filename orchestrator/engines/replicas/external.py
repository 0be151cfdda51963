"""A replica Berth does not run: an OpenAI-compatible server already up (SGLang, TGI, llama.cpp, a remote vLLM).

Its lifecycle belongs to whoever runs it, so start and stop do nothing; Berth only routes to
it once it lists the model, and counts it alive while it answers HTTP at all. A step resumed
after its node was preempted asks the server to continue the cut reply (`continue_final_message`,
as vLLM and SGLang take it), so the server must support that.
"""

from __future__ import annotations

from . import probe
from .protocol import ReplicaHandle, ReplicaSpec


class ExternalReplicaEngine:
    """Replicas that are one server at `url` (with or without the trailing /v1)."""

    def __init__(self, url: str) -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"url: must start with http:// or https://, got {url!r}")
        self.url = probe.v1_url(url)

    async def start(self, spec: ReplicaSpec) -> ReplicaHandle:
        return ReplicaHandle(spec=spec, base_url=self.url)

    async def ready(self, handle: ReplicaHandle) -> bool:
        return await probe.serves_model(handle.base_url, handle.spec.model)

    async def alive(self, handle: ReplicaHandle) -> bool:
        return await probe.answers(handle.base_url)

    async def stop(self, handle: ReplicaHandle, grace_s: float = 10.0) -> None:
        return None  # not ours to stop

    def base_url(self, handle: ReplicaHandle) -> str:
        return handle.base_url
