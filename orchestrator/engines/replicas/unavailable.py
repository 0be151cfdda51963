"""An engine kind this node knows of but cannot run, so a load of its models is refused saying why."""

from __future__ import annotations

from .protocol import ReplicaHandle, ReplicaSpec, ReplicaStartError


class UnavailableReplicaEngine:
    """Stands for engine `kind` on a node that lacks what it needs (e.g. llama-cpp-python is not installed).

    Every start is refused with `reason`; nothing is ever launched, so the other methods only
    answer for handles that cannot exist.
    """

    def __init__(self, kind: str, reason: str) -> None:
        self.kind = kind
        self.reason = reason

    async def start(self, spec: ReplicaSpec) -> ReplicaHandle:
        raise ReplicaStartError(f"model {spec.model!r}: this node has no {self.kind!r} engine: {self.reason}")

    async def ready(self, handle: ReplicaHandle) -> bool:
        return False

    async def alive(self, handle: ReplicaHandle) -> bool:
        return False

    async def stop(self, handle: ReplicaHandle, grace_s: float = 10.0) -> None:
        return None

    def base_url(self, handle: ReplicaHandle) -> str:
        return handle.base_url
