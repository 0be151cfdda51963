#!/usr/bin/env python3
"""Check that a GPU machine's NVML works the way Berth's node agent reads it.

Run on the GPU machine from the repository root (only the standard library and nvidia-ml-py
are needed):

    python deploy/checks/nvml_check.py

Prints the discovered GPUs and one heartbeat sample as JSON and exits 0; prints the reason and
exits 1 when NVML is unavailable or reports no GPU (a GPU node without GPUs is misconfigured).
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root

from orchestrator.node.discovery import GpuDiscovery, NvmlDiscovery, NvmlUnavailable  # noqa: E402


def main(discovery: GpuDiscovery | None = None) -> int:
    nvml = discovery if discovery is not None else NvmlDiscovery()
    try:
        started = time.perf_counter()
        gpus = nvml.discover()
        discover_s = time.perf_counter() - started
        started = time.perf_counter()
        samples = nvml.sample()
        sample_s = time.perf_counter() - started
    except NvmlUnavailable as e:
        print(e, file=sys.stderr)
        return 1
    finally:
        if isinstance(nvml, NvmlDiscovery):
            nvml.close()
    if not gpus:
        print("NVML works but reports no GPUs on this machine", file=sys.stderr)
        return 1
    report = {
        "gpus": [asdict(g) for g in gpus],
        "samples": [asdict(s) for s in samples],
        "discover_seconds": round(discover_s, 4),
        "sample_seconds": round(sample_s, 4),
    }
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
