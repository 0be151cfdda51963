"""How long weights take to reach a GPU, from each place they can be: one set of figures.

The pool predicts a cold start with them and the simulated replicas wait for them, so a
placement that expects a 30 s load sees a 30 s load. They keep the pool's locality order:
local disk < another node in the datacenter < origin. The pool learns each from measured transfers
(`learned_bytes_per_s`), with these figures as its prior.
"""

from __future__ import annotations

import math

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

# Learned rates. Every figure above is a prior: nodes measure their real transfers (bytes over seconds, per
# tier, and per source node for a peer copy), and the pool's estimate moves halfway towards each measurement
# in log space (a geometric EWMA): a link ten times slower than thought reads ~3× slower after one transfer,
# ~6× after two, ~9× after four, and one outlier never moves the estimate by more than the square root of its
# error. Averaging logs, not rates, treats "twice as slow" and "twice as fast" alike.
LEARNING_RATE = 0.5
# A transfer this small measures the connection's round trips, not its bandwidth (1 MiB at a 2.5 GiB/s link is
# 0.4 ms, below one request's latency), so it teaches nothing about the link.
MIN_SAMPLE_BYTES = 2**20


def learned_bytes_per_s(estimate: float, sample_bytes: int, sample_seconds: float) -> float:
    """`estimate` after one measured transfer; unchanged by a sample too small or too quick to mean anything."""
    if sample_bytes < MIN_SAMPLE_BYTES or sample_seconds <= 0:
        return estimate
    measured = sample_bytes / sample_seconds
    return math.exp((1 - LEARNING_RATE) * math.log(estimate) + LEARNING_RATE * math.log(measured))
