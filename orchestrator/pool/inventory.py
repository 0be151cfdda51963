"""Translations from what the store knows (node views, catalogue entries) to what placement reads.

Kept apart from the pool service so the mapping rules (GPU memory, speed, disk bandwidth,
a model's throughput) are stated once, and tested without a database.
"""

from __future__ import annotations

from sdk.wire.catalogue import ModelEntry
from sdk.wire.fleet import NodeView

from ..node.gpu_types import GPU_TYPES
from ..weights_transfer import GIB
from .fleet import Device, ModelSpec, Node

# An 8B model (15 GiB of fp16 weights) serves ~2,500 tokens/s of batch throughput on one H100;
# decode is memory-bound, so throughput scales inversely with the weights read per token.
REFERENCE_TOKENS_PER_S = 2500.0
REFERENCE_WEIGHTS_GIB = 15.0
# Leases one replica serves at once (continuous batching): vLLM's default max_num_seqs is 256,
# but agent steps carry long prompts; 32 keeps KV memory within the catalogue's headroom.
DEFAULT_CONCURRENCY = 32


def node_from_view(view: NodeView) -> Node:
    """A registered node as placement sees it: one device per GPU, memory from NVML or the type."""
    devices = []
    for gpu in view.gpus:
        known = GPU_TYPES.get(gpu.type_name)
        if gpu.memory_total_mib:
            memory_gib = gpu.memory_total_mib / 1024
        elif known is not None:
            memory_gib = known.memory_gib
        else:
            continue  # an unknown GPU without a memory figure cannot be placed on
        devices.append(
            Device(
                index=gpu.index,
                uuid=gpu.uuid or f"{view.node_id}/{gpu.index}",
                type_name=gpu.type_name,
                memory_gib=memory_gib,
                speed=known.relative_speed if known else 1.0,
            )
        )
    return Node(
        id=view.node_id,
        datacenter=view.datacenter,
        zone=view.zone,
        capacity=view.capacity,
        usd_per_hour=view.usd_per_hour,
        devices=devices,
        labels=dict(view.labels),
        disk_gib_per_s=view.disk_bandwidth_gbps * 1e9 / GIB,
        healthy=view.status in ("healthy", "draining"),
        draining=view.status == "draining",
        engines=frozenset(view.engines) or None,
    )


def model_spec(entry: ModelEntry) -> ModelSpec:
    """A self-hosted catalogue entry as placement sees it."""
    tokens_per_s = float(
        entry.engine_args.get("batch_tokens_per_s", 0) or 0
    ) or REFERENCE_TOKENS_PER_S * REFERENCE_WEIGHTS_GIB / max(entry.weights_gib, 1.0)
    concurrency = int(entry.engine_args.get("max_num_seqs", DEFAULT_CONCURRENCY))
    price = entry.usd_per_1m_completion or 0.0
    return ModelSpec(
        name=entry.name,
        weights_gib=entry.weights_gib,
        kv_headroom_gib=entry.kv_headroom_gib,
        tensor_parallel=tuple(entry.tensor_parallel),
        usd_per_1m_tokens=price,
        tokens_per_s=tokens_per_s,
        concurrency=max(concurrency, 1),
        engine=entry.engine,
    )
