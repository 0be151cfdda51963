"""The catalogue of GPU types a Berth node can have, and the `--simulate` inventory parser.

Placement needs three facts per GPU type that NVML does not report: how fast it is next to
the others (to estimate time to first token), what an hour of it costs (to weigh cost against
latency, and spot against on-demand) and which MIG slices it can be cut into (MIG instances are
scheduled as separate devices). Those facts live here, keyed by a type name such as
"H100-80GB"; discovery maps a real device name onto one of these entries.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class MigProfile:
    """One MIG instance shape: `name` as nvidia-smi prints it (e.g. "1g.10gb")."""

    name: str
    compute_slices: int  # of the 7 a MIG-capable GPU has
    memory_gib: float
    max_instances: int  # how many of this profile one GPU holds at most


@dataclass(frozen=True)
class GpuType:
    """A GPU model as the scheduler sees it."""

    name: str  # catalogue key, e.g. "H100-80GB"
    family: str  # the word NVML's device name contains, e.g. "H100" in "NVIDIA H100 80GB HBM3"
    memory_gib: float  # nominal memory, as in the type name
    relative_speed: float  # bf16 dense tensor throughput, H100 = 1.0
    usd_per_hour_on_demand: float
    usd_per_hour_spot: float
    mig_profiles: tuple[MigProfile, ...] = ()

    @property
    def supports_mig(self) -> bool:
        return bool(self.mig_profiles)

    @property
    def memory_mib(self) -> int:
        return int(self.memory_gib * 1024)

    def mig_profile(self, name: str) -> MigProfile:
        """The profile called `name`; ValueError naming the ones this type has."""
        for profile in self.mig_profiles:
            if profile.name == name.strip().lower():
                return profile
        have = ", ".join(p.name for p in self.mig_profiles) or "none (no MIG support)"
        raise ValueError(f"GPU type {self.name} has no MIG profile {name!r}; it has: {have}")


def _mig(*profiles: tuple[str, int, float, int]) -> tuple[MigProfile, ...]:
    return tuple(MigProfile(n, s, m, k) for n, s, m, k in profiles)


# MIG profiles from NVIDIA's MIG user guide ("Supported MIG Profiles"). Every MIG GPU has 7
# compute slices and 8 memory slices; a profile "Ng.Mgb" takes N compute slices and M GB.
_MIG_80GB = _mig(
    ("1g.10gb", 1, 10, 7), ("1g.20gb", 1, 20, 4), ("2g.20gb", 2, 20, 3),
    ("3g.40gb", 3, 40, 2), ("4g.40gb", 4, 40, 1), ("7g.80gb", 7, 80, 1),
)  # fmt: skip
_MIG_H200 = _mig(
    ("1g.18gb", 1, 18, 7), ("1g.35gb", 1, 35, 4), ("2g.35gb", 2, 35, 3),
    ("3g.71gb", 3, 71, 2), ("4g.71gb", 4, 71, 1), ("7g.141gb", 7, 141, 1),
)  # fmt: skip
_MIG_A100_40GB = _mig(
    ("1g.5gb", 1, 5, 7), ("1g.10gb", 1, 10, 4), ("2g.10gb", 2, 10, 3),
    ("3g.20gb", 3, 20, 2), ("4g.20gb", 4, 20, 1), ("7g.40gb", 7, 40, 1),
)  # fmt: skip

# relative_speed = the type's dense bf16 tensor TFLOPS ÷ H100 SXM's 989 (NVIDIA datasheets,
# dense, i.e. without the 2:4-sparsity doubling the datasheets headline):
#   H100 989 → 1.0;  H200 989 (same Hopper die; its gain is memory, 4.8 vs 3.35 TB/s) → 1.0;
#   A100 312 → 0.315;  L40S 362 → 0.366;  L4 121 → 0.122;
#   A10G: NVIDIA publishes A10's 125 (AWS's A10G variant runs lower clocks, so this is a
#   ceiling) → 0.126;  T4 has no bf16; its fp16 65 → 0.066.
# Decode speed follows memory bandwidth more than FLOPS; the pool's TTFT score is about
# prefill, which is compute bound, hence FLOPS here.
#
# Prices: USD per GPU-hour, US list prices seen 2024–25, on-demand then spot (spot moves
# hourly; these are typical, around 40–60 % of on-demand):
#   H100 $2.99 (Lambda on-demand), spot ~$1.80;  H200 $3.79 (specialist clouds' 8×H200
#   nodes ÷ 8), spot ~$2.30;  A100-80GB $1.79 (Lambda), spot ~$1.10;  A100-40GB $1.29
#   (Lambda), spot ~$0.80;  L40S $1.861 (AWS g6e.xlarge), spot ~$0.75;  L4 $0.805 (AWS
#   g6.xlarge), spot ~$0.32;  A10G $1.006 (AWS g5.xlarge), spot ~$0.40;  T4 $0.526 (AWS
#   g4dn.xlarge), spot ~$0.21.
GPU_TYPES: dict[str, GpuType] = {
    t.name: t
    for t in (
        GpuType("H100-80GB", "H100", 80, 1.0, 2.99, 1.80, _MIG_80GB),
        GpuType("H200-141GB", "H200", 141, 1.0, 3.79, 2.30, _MIG_H200),
        GpuType("A100-80GB", "A100", 80, 0.315, 1.79, 1.10, _MIG_80GB),
        GpuType("A100-40GB", "A100", 40, 0.315, 1.29, 0.80, _MIG_A100_40GB),
        GpuType("L40S-48GB", "L40S", 48, 0.366, 1.861, 0.75),
        GpuType("L4-24GB", "L4", 24, 0.122, 0.805, 0.32),
        GpuType("A10G-24GB", "A10G", 24, 0.126, 1.006, 0.40),
        GpuType("T4-16GB", "T4", 16, 0.066, 0.526, 0.21),
    )
}

# The host's CPU as a device, for engines that run there (llama.cpp): `berth node --simulate 1xCPU-16GB`
# gives a node without a GPU one device whose "memory" is 16 GiB of host RAM set aside for models and
# their KV caches. Nothing about it is simulated but the inventory itself (NVML cannot report a CPU);
# the replicas placed on it are real processes computing on the CPU.
#   relative_speed: a 4-vCPU slice (2 cores with AVX-512: 2 FMA units × 16 fp32 lanes × 2 flops ×
#   3.0 GHz = 192 GFLOPS per core, 384 in all) ÷ H100's 989 TFLOPS → 0.0004.
#   Price: the slice as a VM of its size, AWS m7i.xlarge (4 vCPU, 16 GiB) $0.2016/h on demand, spot ~$0.08.
CPU_TYPES: dict[str, GpuType] = {t.name: t for t in (GpuType("CPU-16GB", "CPU", 16, 0.0004, 0.2016, 0.08),)}
GPU_TYPES.update(CPU_TYPES)  # one catalogue: placement, pricing and registration read devices the same way

# A simulated node with more GPUs than this is a typo, not a machine: the largest common
# servers hold 8 (HGX) or 16 GPUs; 64 leaves room for odd test rigs.
MAX_SIMULATED_GPUS_PER_TYPE = 64

# NVML reports usable memory, a little under the nominal size (an H100-80GB says 79.6 GiB, an
# L40S 45 GiB of 48, a T4 15 GiB of 16). A device whose memory is further than this from every
# catalogue size of its family (e.g. the 94 GB H100 NVL) is a type we do not know.
_MEMORY_MATCH_TOLERANCE = 0.12


def known_types() -> str:
    return ", ".join(GPU_TYPES)


def get_gpu_type(name: str) -> GpuType:
    """The catalogue entry for `name` (case-insensitive); ValueError listing the known types."""
    wanted = name.strip().upper()
    for type_name, gpu_type in GPU_TYPES.items():
        if type_name.upper() == wanted:
            return gpu_type
    raise ValueError(f"unknown GPU type {name.strip()!r}; known: {known_types()}")


def match_device(device_name: str, memory_total_mib: int | None) -> GpuType | None:
    """The catalogue type of a device NVML names `device_name`, or None if we do not know it.

    Names alone are ambiguous ("NVIDIA A100-SXM4-40GB" vs "NVIDIA A100 80GB PCIe"), so the
    family word picks candidates and the reported memory picks among them.
    """
    candidates = [
        t for t in GPU_TYPES.values() if t.name not in CPU_TYPES and re.search(rf"\b{t.family}\b", device_name, re.I)
    ]
    if not candidates:
        return None
    if memory_total_mib is None:
        return candidates[0] if len(candidates) == 1 else None
    gib = memory_total_mib / 1024
    best = min(candidates, key=lambda t: abs(t.memory_gib - gib))
    return best if abs(best.memory_gib - gib) <= best.memory_gib * _MEMORY_MATCH_TOLERANCE else None


_COUNTED = re.compile(r"(?P<count>[^a-z]*?)\s*[x×]\s*(?P<type>[a-z].*)", re.I)


def parse_simulate(spec: str) -> list[GpuType]:
    """GPU types of a `--simulate` inventory such as "2xH100-80GB, 1xA100-40GB", one per GPU.

    A part without a count ("H100-80GB") is one GPU. Raises ValueError naming the bad part.
    """
    gpus: list[GpuType] = []
    parts = [p.strip() for p in spec.split(",")]
    if not any(parts):
        raise ValueError(f"empty GPU inventory in --simulate; expected e.g. '2xH100-80GB'; known: {known_types()}")
    for part in parts:
        if not part:
            raise ValueError(f"empty part in --simulate {spec!r}; expected e.g. '2xH100-80GB,1xL4-24GB'")
        counted = _COUNTED.fullmatch(part)
        count_text, type_text = (counted["count"], counted["type"]) if counted else ("1", part)
        try:
            gpu_type = get_gpu_type(type_text)
        except ValueError:
            raise ValueError(f"unknown GPU type {type_text.strip()!r} in --simulate; known: {known_types()}") from None
        if not count_text.strip().isdigit() or not 1 <= int(count_text) <= MAX_SIMULATED_GPUS_PER_TYPE:
            raise ValueError(
                f"bad GPU count {count_text.strip()!r} in --simulate part {part!r}; "
                f"expected a whole number from 1 to {MAX_SIMULATED_GPUS_PER_TYPE}"
            )
        gpus.extend([gpu_type] * int(count_text))
    return gpus
