"""How long weights take to reach a GPU, from each place they can be: one set of figures.

The pool predicts a cold start with them and the simulated replicas wait for them, so a
placement that expects a 30 s load sees a 30 s load. They keep DESIGN.md's locality order:
local disk < another node in the datacenter < origin.
"""

from __future__ import annotations

GIB = 1024**3
# Local NVMe, sequential read of large files: a PCIe 4.0 x4 drive peaks at ~7 GB/s; ~6 GB/s
# sustained through the filesystem.
DISK_BYTES_PER_S = 6e9
# Another node in the same datacenter: a 25 Gbit/s node NIC ≈ 3.1 GB/s raw, ~2.5 GiB/s after
# protocol overhead, shared with the source node's own traffic.
DATACENTER_BYTES_PER_S = 2.5 * GIB
# The model's origin (an object store or hub across a WAN): a few Gbit/s per stream ≈ 0.5 GiB/s.
ORIGIN_BYTES_PER_S = 0.5 * GIB
# vLLM's start once weights are read: CUDA context, memory profiling and CUDA graph capture
# for the batch sizes it serves; 15–30 s measured for 7–8B models on one H100, take 20.
ENGINE_START_S = 20.0
