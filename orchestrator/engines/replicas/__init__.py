"""How a node starts, checks and stops one model replica, whatever engine serves it.

One protocol (`ReplicaEngine`) with the simulated engine as the default and llama.cpp (a real
model on the CPU), vLLM and already-running OpenAI-compatible servers beside it:

    engine = SimulatedReplicaEngine(load_time_scale=0.01, latency_scale=0)
    handle = await engine.start(ReplicaSpec("r1", "llama-3.1-8b", (0,), weights_bytes=16 * 10**9))
    while not await engine.ready(handle):   # alive but loading: never kill it for being slow
        ...
    litellm.completion(model="hosted_vllm/llama-3.1-8b", api_base=engine.base_url(handle), ...)
    await engine.stop(handle, grace_s=10)
"""

from .external import ExternalReplicaEngine
from .llamacpp import LlamaCppReplicaEngine
from .protocol import LOAD_TIERS, LoadTier, ReplicaEngine, ReplicaHandle, ReplicaSpec, ReplicaStartError, replica_spec
from .sglang import SglangReplicaEngine
from .simulated import SimulatedReplicaEngine, planned_load_delay_s
from .vllm import VllmReplicaEngine

__all__ = [
    "LOAD_TIERS",
    "ExternalReplicaEngine",
    "LlamaCppReplicaEngine",
    "LoadTier",
    "ReplicaEngine",
    "ReplicaHandle",
    "ReplicaSpec",
    "ReplicaStartError",
    "SglangReplicaEngine",
    "SimulatedReplicaEngine",
    "VllmReplicaEngine",
    "planned_load_delay_s",
    "replica_spec",
]
