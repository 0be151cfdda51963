"""What GPUs a node has and how they are doing: NVML on real hardware, a simulation otherwise.

The node agent registers its inventory once (`discover`) and then reports `sample`s in its
heartbeats. Both implementations share the `GpuDiscovery` protocol so the agent, the pool and
the simulator never know which one they run on; the simulated one is a product feature
(`berth node --simulate 2xH100-80GB` runs the whole system on a laptop), not a test double.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from .gpu_types import GpuType, MigProfile, match_device

UNKNOWN_TYPE = "unknown"

_MIB = 1024 * 1024


class NvmlUnavailable(RuntimeError):
    """NVML (the NVIDIA driver's management library) cannot be used on this machine."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"NVML is not available: {reason}; use --simulate to run without GPUs")
        self.reason = reason


@dataclass(frozen=True)
class MigDevice:
    """A MIG instance: scheduled as its own device, so it carries its own UUID."""

    uuid: str
    profile: str | None  # "1g.10gb"; None when the driver does not name it
    memory_total_mib: int | None


@dataclass(frozen=True)
class GpuInfo:
    """One physical GPU at discovery time.

    Fields NVML could not read are None (or False / empty for MIG) and `field_errors` says
    which and why, so a flaky counter never hides a whole GPU. A GPU the scheduler must not use
    (unreadable memory, lost from the bus, uncorrectable ECC errors) has `healthy=False` and
    the reason.
    """

    index: int
    uuid: str | None
    name: str | None  # as the driver names it, e.g. "NVIDIA H100 80GB HBM3"
    type_name: str  # catalogue key ("H100-80GB") or "unknown"
    memory_total_mib: int | None
    memory_used_mib: int | None
    utilization_pct: int | None  # NVML does not report it for a GPU in MIG mode
    ecc_errors: int | None  # uncorrected, since the driver loaded; None if ECC is unsupported
    mig_mode: bool
    mig_devices: list[MigDevice] = field(default_factory=list)
    healthy: bool = True
    unhealthy_reason: str | None = None
    field_errors: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class GpuMetrics:
    """What a heartbeat carries per GPU: the fields that change while the node runs."""

    index: int
    uuid: str | None
    memory_used_mib: int | None
    utilization_pct: int | None
    ecc_errors: int | None
    healthy: bool = True
    unhealthy_reason: str | None = None


class GpuDiscovery(Protocol):
    def discover(self) -> list[GpuInfo]: ...

    def sample(self) -> list[GpuMetrics]: ...


def metrics_of(info: GpuInfo) -> GpuMetrics:
    return GpuMetrics(
        info.index, info.uuid, info.memory_used_mib, info.utilization_pct, info.ecc_errors,
        info.healthy, info.unhealthy_reason,
    )  # fmt: skip


def _text(value: str | bytes) -> str:
    # nvidia-ml-py < 11.5 returned bytes; newer versions return str.
    return value.decode() if isinstance(value, bytes) else value


_MIG_PROFILE_IN_NAME = re.compile(r"\b(\d+g\.\d+gb)\b", re.I)


class NvmlDiscovery:
    """GPU discovery through NVML (`pynvml`, from the nvidia-ml-py package).

    NVML is initialised on first use and kept open until `close()`: heartbeats sample every
    few seconds, and nvmlInit can take a noticeable time on a GPU without persistence mode.
    `nvml` is the module to call, `pynvml` by default; tests hand in a fake.
    """

    def __init__(self, nvml: Any | None = None) -> None:
        self._nvml = nvml
        self._open = False
        self._lock = threading.Lock()

    def __enter__(self) -> NvmlDiscovery:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            if self._open:
                nvml = self._nvml
                assert nvml is not None  # _opened() loads the module before it marks NVML open
                self._open = False
                try:
                    nvml.nvmlShutdown()
                except nvml.NVMLError:
                    pass  # shutting down a library that failed is not worth an error

    def discover(self) -> list[GpuInfo]:
        with self._lock:
            nvml = self._opened()
            return [self._device(nvml, index) for index in range(self._count(nvml))]

    def sample(self) -> list[GpuMetrics]:
        # The same reads minus names and MIG layout would save microseconds, not worth a
        # second code path that could disagree with discover().
        return [metrics_of(info) for info in self.discover()]

    def _opened(self) -> Any:
        if self._nvml is None:
            try:
                import pynvml  # type: ignore[import-untyped]  # nvidia-ml-py ships neither type hints nor stubs
            except ImportError as e:
                raise NvmlUnavailable(f"the pynvml module is not installed ({e})") from e
            self._nvml = pynvml
        if not self._open:
            try:
                self._nvml.nvmlInit()
            except self._nvml.NVMLError as e:
                raise NvmlUnavailable(f"{e} (is the NVIDIA driver installed and loaded?)") from e
            self._open = True
        return self._nvml

    def _count(self, nvml: Any) -> int:
        try:
            return int(nvml.nvmlDeviceGetCount())
        except nvml.NVMLError as e:
            raise NvmlUnavailable(f"cannot count GPUs: {e}") from e

    def _device(self, nvml: Any, index: int) -> GpuInfo:
        errors: dict[str, str] = {}
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
        except nvml.NVMLError as e:
            return GpuInfo(index, None, None, UNKNOWN_TYPE, None, None, None, None, False,
                           healthy=False, unhealthy_reason=f"cannot open device: {e}",
                           field_errors={"handle": str(e)})  # fmt: skip

        lost = False

        def read(name: str, call: Any) -> Any:
            nonlocal lost
            try:
                return call(handle)
            except nvml.NVMLError as e:
                errors[name] = str(e)
                lost = lost or isinstance(e, getattr(nvml, "NVMLError_GpuIsLost", ()))
                return None

        uuid = read("uuid", nvml.nvmlDeviceGetUUID)
        name = read("name", nvml.nvmlDeviceGetName)
        memory = read("memory", nvml.nvmlDeviceGetMemoryInfo)
        utilization = read("utilization", nvml.nvmlDeviceGetUtilizationRates)
        ecc = self._ecc(nvml, handle, errors)
        mig_mode, mig_devices = self._mig(nvml, handle, errors)
        total_mib = memory.total // _MIB if memory is not None else None
        gpu_type = match_device(_text(name), total_mib) if name is not None else None

        reason = None
        if "memory" in errors:
            reason = f"cannot read memory: {errors['memory']}"
        elif "uuid" in errors:
            reason = f"cannot read UUID: {errors['uuid']}"
        elif ecc:
            reason = f"{ecc} uncorrected ECC errors since the driver loaded (the GPU needs a reset)"
        if lost:
            reason = "GPU has fallen off the bus (NVML: GPU is lost)"
        return GpuInfo(
            index=index,
            uuid=_text(uuid) if uuid is not None else None,
            name=_text(name) if name is not None else None,
            type_name=gpu_type.name if gpu_type else UNKNOWN_TYPE,
            memory_total_mib=total_mib,
            memory_used_mib=memory.used // _MIB if memory is not None else None,
            utilization_pct=int(utilization.gpu) if utilization is not None else None,
            ecc_errors=ecc,
            mig_mode=mig_mode,
            mig_devices=mig_devices,
            healthy=reason is None,
            unhealthy_reason=reason,
            field_errors=errors,
        )

    def _ecc(self, nvml: Any, handle: Any, errors: dict[str, str]) -> int | None:
        try:
            return int(nvml.nvmlDeviceGetTotalEccErrors(
                handle, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC))  # fmt: skip
        except nvml.NVMLError_NotSupported:
            return None  # consumer GPUs and the T4 with ECC off: nothing to count, not a fault
        except nvml.NVMLError as e:
            errors["ecc"] = str(e)
            return None

    def _mig(self, nvml: Any, handle: Any, errors: dict[str, str]) -> tuple[bool, list[MigDevice]]:
        try:
            current, _pending = nvml.nvmlDeviceGetMigMode(handle)
        except nvml.NVMLError_NotSupported:
            return False, []  # a GPU without MIG (L4, L40S, A10G, T4)
        except nvml.NVMLError as e:
            errors["mig_mode"] = str(e)
            return False, []
        if current != nvml.NVML_DEVICE_MIG_ENABLE:
            return False, []
        try:
            slots = int(nvml.nvmlDeviceGetMaxMigDeviceCount(handle))
        except nvml.NVMLError as e:
            errors["mig_devices"] = str(e)
            return True, []
        devices: list[MigDevice] = []
        for slot in range(slots):
            try:
                mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
                uuid = _text(nvml.nvmlDeviceGetUUID(mig))
            except nvml.NVMLError_NotFound:
                continue  # an empty slot: fewer instances than the maximum are configured
            except nvml.NVMLError as e:
                errors[f"mig_device[{slot}]"] = str(e)
                continue
            devices.append(MigDevice(uuid, _mig_profile(nvml, mig), _mig_memory(nvml, mig)))
        return True, devices


def _mig_profile(nvml: Any, mig: Any) -> str | None:
    # Recent drivers name a MIG device "<GPU name> MIG 1g.10gb"; older ones do not.
    try:
        found = _MIG_PROFILE_IN_NAME.search(_text(nvml.nvmlDeviceGetName(mig)))
    except nvml.NVMLError:
        return None
    return found.group(1).lower() if found else None


def _mig_memory(nvml: Any, mig: Any) -> int | None:
    try:
        return int(nvml.nvmlDeviceGetMemoryInfo(mig).total // _MIB)
    except nvml.NVMLError:
        return None


@dataclass
class _SimulatedState:
    load: float = 0.0  # 0..1, set by the node agent from the work its replicas are doing
    memory_used_mib: int = 0
    unhealthy_reason: str | None = None


class SimulatedDiscovery:
    """A node's GPUs without hardware: the catalogue's sizes, deterministic UUIDs, and the
    utilization and memory the node agent reports for its simulated replicas.

    UUIDs are `GPU-sim-<node>-<index>` (MIG instances `MIG-sim-<node>-<index>-<slot>`) so a
    restarted simulated node is the same node to the control plane.
    """

    def __init__(
        self,
        types: Sequence[GpuType],
        seed_node_id: str,
        mig_layouts: Mapping[int, Sequence[str]] | None = None,
    ) -> None:
        self._types = list(types)
        self._node = seed_node_id
        self._mig: dict[int, list[MigProfile]] = {}
        for index, names in (mig_layouts or {}).items():
            gpu_type = self._gpu_type(index)
            _check_mig_layout(gpu_type, list(names))
            self._mig[index] = [gpu_type.mig_profile(n) for n in names]
        self._state = [_SimulatedState() for _ in self._types]
        self._lock = threading.Lock()

    def _gpu_type(self, index: int) -> GpuType:
        if not 0 <= index < len(self._types):
            raise ValueError(f"no simulated GPU {index}; this node has GPUs 0..{len(self._types) - 1}")
        return self._types[index]

    def set_load(self, index: int, load: float, memory_used_mib: int | None = None) -> None:
        """Record what GPU `index` is doing: `load` in 0..1 becomes its utilization."""
        gpu_type = self._gpu_type(index)
        with self._lock:
            state = self._state[index]
            state.load = min(max(load, 0.0), 1.0)
            if memory_used_mib is not None:
                state.memory_used_mib = min(max(memory_used_mib, 0), gpu_type.memory_mib)

    def set_health(self, index: int, unhealthy_reason: str | None) -> None:
        """Mark GPU `index` unhealthy (a reason) or healthy again (None), for failure drills."""
        self._gpu_type(index)
        with self._lock:
            self._state[index].unhealthy_reason = unhealthy_reason

    def discover(self) -> list[GpuInfo]:
        with self._lock:
            return [self._info(i, t, self._state[i]) for i, t in enumerate(self._types)]

    def sample(self) -> list[GpuMetrics]:
        return [metrics_of(info) for info in self.discover()]

    def _info(self, index: int, gpu_type: GpuType, state: _SimulatedState) -> GpuInfo:
        profiles = self._mig.get(index, [])
        mig_devices = [
            MigDevice(f"MIG-sim-{self._node}-{index}-{slot}", p.name, int(p.memory_gib * 1024))
            for slot, p in enumerate(profiles)
        ]
        return GpuInfo(
            index=index,
            uuid=f"GPU-sim-{self._node}-{index}",
            name=f"Simulated {gpu_type.name}",
            type_name=gpu_type.name,
            memory_total_mib=gpu_type.memory_mib,
            memory_used_mib=state.memory_used_mib,
            utilization_pct=round(state.load * 100),
            ecc_errors=0,
            mig_mode=bool(profiles),
            mig_devices=mig_devices,
            healthy=state.unhealthy_reason is None,
            unhealthy_reason=state.unhealthy_reason,
        )


def _check_mig_layout(gpu_type: GpuType, profiles: list[str]) -> None:
    """Refuse a layout no real GPU accepts: more than 7 compute slices, or a profile more times
    than it fits. (Real placement rules are stricter about slice positions; this catches the
    layouts that could never work.)"""
    slices = sum(gpu_type.mig_profile(p).compute_slices for p in profiles)
    if slices > 7:
        raise ValueError(f"MIG layout {profiles} on {gpu_type.name} needs {slices} compute slices; a GPU has 7")
    for name in set(profiles):
        limit = gpu_type.mig_profile(name).max_instances
        if profiles.count(name) > limit:
            raise ValueError(
                f"MIG layout {profiles} on {gpu_type.name} has {profiles.count(name)}× {name}; at most {limit} fit"
            )
