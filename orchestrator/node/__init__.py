"""The GPU node's own view of itself: which GPUs it has and which model weights sit on its disk.

Only the standard library (and, for real GPUs, pynvml) is imported here, so the node agent and
`deploy/checks/nvml_check.py` run on a bare GPU machine.
"""

from .discovery import (
    GpuDiscovery,
    GpuInfo,
    GpuMetrics,
    MigDevice,
    NvmlDiscovery,
    NvmlUnavailable,
    SimulatedDiscovery,
)
from .gpu_types import GPU_TYPES, GpuType, MigProfile, get_gpu_type, match_device, parse_simulate
from .weights_cache import CachedWeights, LoadPlan, WeightsCache, WeightsCacheError

__all__ = [
    "GPU_TYPES",
    "CachedWeights",
    "GpuDiscovery",
    "GpuInfo",
    "GpuMetrics",
    "GpuType",
    "LoadPlan",
    "MigDevice",
    "MigProfile",
    "NvmlDiscovery",
    "NvmlUnavailable",
    "SimulatedDiscovery",
    "WeightsCache",
    "WeightsCacheError",
    "get_gpu_type",
    "match_device",
    "parse_simulate",
]
