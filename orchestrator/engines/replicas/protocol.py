"""What a node asks of an inference engine to run one model replica, whatever the engine.

A replica is one model served on one node's GPU(s). The node agent starts it, watches two
separate signals, and stops it:
- *alive* (the process exists) decides whether the replica has failed and must be replaced;
- *ready* (the server lists the model on /v1/models) decides whether leases may route to it.
A loading replica is alive but not ready for seconds to minutes (weights, CUDA graphs), so the
two must never be conflated: killing a replica for being slow to load would throw that work away.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol, runtime_checkable

if TYPE_CHECKING:
    from sdk import ModelEntry

# Where a replica's weights come from, best first (the pool's locality tiers, docs/weights.md): "warm"
# already in host memory, "disk" the node's weights cache, "datacenter" another node nearby,
# "origin" the model's source across the WAN.
LoadTier = Literal["warm", "disk", "datacenter", "origin"]
LOAD_TIERS: tuple[LoadTier, ...] = ("warm", "disk", "datacenter", "origin")

EngineArg = str | int | float | bool


class PlannedLoad(Protocol):
    """What a replica's spec needs of the node's plan for its weights (the weights cache's LoadPlan): engines
    sit below the node, so they name the shape, not the node's class."""

    @property
    def tier(self) -> LoadTier: ...

    @property
    def bytes_to_fetch(self) -> int: ...


class ReplicaStartError(RuntimeError):
    """A replica could not be launched; the message names what is missing or wrong."""


@dataclass(frozen=True)
class ReplicaSpec:
    """Everything an engine needs to launch one replica, decided by placement and the weights cache."""

    replica_id: str
    model: str  # the catalogue name; the replica serves it under this name on /v1/models
    gpu_indexes: tuple[int, ...]
    tensor_parallel: int = 1
    port: int = 0  # 0 = the engine picks a free port
    weights_bytes: int = 0
    load_tier: LoadTier = "disk"
    bytes_to_fetch: int = 0  # from the weights cache's LoadPlan; 0 for "warm" and "disk"
    engine_args: dict[str, EngineArg] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)  # added to the child's environment
    # The weights cache's local copy the engine loads (a llama.cpp replica: the .gguf file). Engines start on
    # it and never on a hub id, so none downloads on its own; "" for the simulated engine, which reads none.
    weights_path: str = ""

    def __post_init__(self) -> None:
        if not self.replica_id:
            raise ValueError("replica_id: a replica needs an id")
        if not self.model:
            raise ValueError("model: a replica needs a model name")
        if self.tensor_parallel < 1:
            raise ValueError(f"tensor_parallel: must be >= 1, got {self.tensor_parallel}")
        if self.gpu_indexes and len(self.gpu_indexes) != self.tensor_parallel:
            raise ValueError(
                f"gpu_indexes: tensor_parallel {self.tensor_parallel} needs as many GPUs, got {list(self.gpu_indexes)}"
            )
        if any(i < 0 for i in self.gpu_indexes) or len(set(self.gpu_indexes)) != len(self.gpu_indexes):
            raise ValueError(f"gpu_indexes: must be distinct and >= 0, got {list(self.gpu_indexes)}")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port: must be within 0..65535, got {self.port}")
        if self.load_tier not in LOAD_TIERS:
            raise ValueError(f"load_tier: must be one of {', '.join(LOAD_TIERS)}, got {self.load_tier!r}")
        if self.weights_bytes < 0:
            raise ValueError(f"weights_bytes: must be >= 0, got {self.weights_bytes}")
        if not 0 <= self.bytes_to_fetch <= self.weights_bytes:
            raise ValueError(
                f"bytes_to_fetch: must be within 0..weights_bytes ({self.weights_bytes}), got {self.bytes_to_fetch}"
            )
        if self.load_tier in ("warm", "disk") and self.bytes_to_fetch:
            raise ValueError(
                f"bytes_to_fetch: nothing is fetched for tier {self.load_tier!r}, got {self.bytes_to_fetch}"
            )


def replica_spec(
    entry: ModelEntry,
    replica_id: str,
    gpu_indexes: tuple[int, ...],
    plan: PlannedLoad,
    port: int = 0,
    env: dict[str, str] | None = None,
    weights_path: str = "",
) -> ReplicaSpec:
    """The spec for a replica of catalogue `entry` on `gpu_indexes`, loading as the weights cache planned.

    Tensor parallelism is one GPU per shard, so the degree is the number of GPUs placement gave.
    """
    return ReplicaSpec(
        replica_id=replica_id,
        model=entry.name,
        gpu_indexes=tuple(gpu_indexes),
        tensor_parallel=max(len(gpu_indexes), 1),
        port=port,
        weights_bytes=round(entry.weights_gib * 2**30),  # the catalogue counts GiB
        load_tier=plan.tier,
        bytes_to_fetch=plan.bytes_to_fetch,
        engine_args=dict(entry.engine_args),
        env=dict(env or {}),
        weights_path=weights_path,
    )


@dataclass
class ReplicaHandle:
    """A launched replica: where it listens and, when the node owns it, its process."""

    spec: ReplicaSpec
    base_url: str  # ends in /v1, as litellm's hosted_vllm route wants it
    port: int = 0  # the local port the node gave it; 0 for a server Berth does not run
    process: subprocess.Popen[bytes] | None = None  # None for a server Berth does not run
    log_path: Path | None = None  # the child's stdout and stderr
    load_delay_s: float = 0.0  # the simulated engine's planned load wait; 0 for real engines

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None


@runtime_checkable
class ReplicaEngine(Protocol):
    """Starts, checks and stops replicas of one engine kind; one instance per node agent."""

    async def start(self, spec: ReplicaSpec) -> ReplicaHandle:
        """Launch the replica and return at once; readiness comes later (see `ready`)."""
        ...

    async def ready(self, handle: ReplicaHandle) -> bool:
        """True once the server answers /v1/models listing the replica's model."""
        ...

    async def alive(self, handle: ReplicaHandle) -> bool:
        """True while the replica's process exists, loading or not."""
        ...

    async def stop(self, handle: ReplicaHandle, grace_s: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after `grace_s`; returns once the process is gone."""
        ...

    def base_url(self, handle: ReplicaHandle) -> str:
        """The replica's OpenAI-compatible root, ending in /v1."""
        ...
