"""GPU discovery: the catalogue, the --simulate parser, NVML through a fake NVML module, and the
real pynvml on a machine without GPUs."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from orchestrator.node import (
    GPU_TYPES,
    NvmlDiscovery,
    NvmlUnavailable,
    SimulatedDiscovery,
    get_gpu_type,
    match_device,
    parse_simulate,
)

REPO = Path(__file__).resolve().parents[2]
GIB = 1024**3
MIB = 1024**2


# -- the catalogue and --simulate --


def test_catalogue_has_the_types_the_fleet_uses() -> None:
    for name in ("H100-80GB", "H200-141GB", "A100-80GB", "A100-40GB", "L40S-48GB", "L4-24GB", "A10G-24GB", "T4-16GB"):
        gpu = GPU_TYPES[name]
        assert gpu.usd_per_hour_spot < gpu.usd_per_hour_on_demand
        assert 0 < gpu.relative_speed <= 1.0
    assert GPU_TYPES["H100-80GB"].relative_speed == 1.0
    h100 = {p.name: p.max_instances for p in GPU_TYPES["H100-80GB"].mig_profiles}
    assert h100["1g.10gb"] == 7 and h100["2g.20gb"] == 3 and h100["3g.40gb"] == 2 and h100["7g.80gb"] == 1
    assert GPU_TYPES["A100-40GB"].supports_mig and not GPU_TYPES["L4-24GB"].supports_mig


def test_parse_simulate_counts_types_case_insensitively_and_tolerates_spaces() -> None:
    gpus = parse_simulate(" 2x h100-80gb ,1 x A100-40GB, L4-24GB")
    assert [g.name for g in gpus] == ["H100-80GB", "H100-80GB", "A100-40GB", "L4-24GB"]
    assert [g.name for g in parse_simulate("H200-141GB")] == ["H200-141GB"]


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("2xH900", "unknown GPU type 'H900' in --simulate; known: H100-80GB, H200-141GB"),
        ("0xH100-80GB", "bad GPU count '0'"),
        ("2.5xL4-24GB", "bad GPU count '2.5'"),
        ("-1xL4-24GB", "bad GPU count '-1'"),
        ("1000xL4-24GB", "bad GPU count '1000'"),
        ("H100-80GB,,L4-24GB", "empty part"),
        ("  ", "empty GPU inventory"),
    ],
)
def test_parse_simulate_names_the_bad_part(spec: str, says: str) -> None:
    with pytest.raises(ValueError) as refused:
        parse_simulate(spec)
    assert says in str(refused.value)


def test_device_names_map_to_the_catalogue_by_family_and_memory() -> None:
    assert match_device("NVIDIA H100 80GB HBM3", 81559).name == "H100-80GB"  # type: ignore[union-attr]
    assert match_device("NVIDIA H200", 143771).name == "H200-141GB"  # type: ignore[union-attr]
    assert match_device("NVIDIA A100-SXM4-40GB", 40960).name == "A100-40GB"  # type: ignore[union-attr]
    assert match_device("NVIDIA A100 80GB PCIe", 81920).name == "A100-80GB"  # type: ignore[union-attr]
    assert match_device("NVIDIA L4", 23034).name == "L4-24GB"  # type: ignore[union-attr]
    assert match_device("NVIDIA L40S", 46068).name == "L40S-48GB"  # type: ignore[union-attr]
    assert match_device("Tesla T4", 15360).name == "T4-16GB"  # type: ignore[union-attr]
    assert match_device("NVIDIA H100 NVL", 95830) is None  # 94 GB: not a catalogue type
    assert match_device("NVIDIA GeForce RTX 4090", 24564) is None
    with pytest.raises(ValueError, match="known: H100-80GB"):
        get_gpu_type("B200")


# -- a fake NVML module: the pynvml functions NvmlDiscovery calls, over a described machine --


class NVMLError(Exception):
    pass


class NVMLError_NotSupported(NVMLError):  # noqa: N801 - pynvml's names
    def __str__(self) -> str:
        return "Not Supported"


class NVMLError_NotFound(NVMLError):  # noqa: N801
    def __str__(self) -> str:
        return "Not Found"


class NVMLError_LibraryNotFound(NVMLError):  # noqa: N801
    def __str__(self) -> str:
        return "NVML Shared Library Not Found"


class NVMLError_GpuIsLost(NVMLError):  # noqa: N801
    def __str__(self) -> str:
        return "GPU is lost"


class NVMLError_Unknown(NVMLError):  # noqa: N801
    def __str__(self) -> str:
        return "Unknown Error"


@dataclass
class FakeGpu:
    name: str
    uuid: str
    total_mib: int
    used_mib: int = 0
    util: int = 0
    ecc: int | None = 0  # None: ECC not supported
    mig: list[tuple[str, str, int]] | None = None  # (uuid, profile, MiB) per instance; None: no MIG
    mig_slots: int = 7
    fail: dict[str, NVMLError] | None = None  # NVML function name → the error it raises


class FakeNvml:
    """Implements the part of pynvml that NvmlDiscovery uses, over a list of FakeGpu."""

    NVMLError = NVMLError
    NVMLError_NotSupported = NVMLError_NotSupported
    NVMLError_NotFound = NVMLError_NotFound
    NVMLError_LibraryNotFound = NVMLError_LibraryNotFound
    NVMLError_GpuIsLost = NVMLError_GpuIsLost
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    NVML_VOLATILE_ECC = 0
    NVML_DEVICE_MIG_ENABLE = 1

    def __init__(self, gpus: list[FakeGpu], init_error: NVMLError | None = None) -> None:
        self.gpus = gpus
        self.init_error = init_error
        self.inits = 0
        self.shutdowns = 0

    def _check(self, handle: Any, call: str) -> None:
        gpu = handle if isinstance(handle, FakeGpu) else None
        if gpu is not None and gpu.fail and call in gpu.fail:
            raise gpu.fail[call]

    def nvmlInit(self) -> None:  # noqa: N802
        if self.init_error is not None:
            raise self.init_error
        self.inits += 1

    def nvmlShutdown(self) -> None:  # noqa: N802
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:  # noqa: N802
        self._check(self.gpus[index], "nvmlDeviceGetHandleByIndex")
        return self.gpus[index]

    def nvmlDeviceGetName(self, handle: Any) -> str | bytes:  # noqa: N802
        self._check(handle, "nvmlDeviceGetName")
        return handle.name if isinstance(handle, FakeGpu) else handle["name"]

    def nvmlDeviceGetUUID(self, handle: Any) -> str:  # noqa: N802
        self._check(handle, "nvmlDeviceGetUUID")
        return handle.uuid if isinstance(handle, FakeGpu) else handle["uuid"]

    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> SimpleNamespace:  # noqa: N802
        self._check(handle, "nvmlDeviceGetMemoryInfo")
        if isinstance(handle, dict):
            return SimpleNamespace(total=handle["mib"] * MIB, used=0, free=handle["mib"] * MIB)
        return SimpleNamespace(total=handle.total_mib * MIB, used=handle.used_mib * MIB,
                               free=(handle.total_mib - handle.used_mib) * MIB)  # fmt: skip

    def nvmlDeviceGetUtilizationRates(self, handle: FakeGpu) -> SimpleNamespace:  # noqa: N802
        self._check(handle, "nvmlDeviceGetUtilizationRates")
        if handle.mig:
            raise NVMLError_NotSupported()  # as the real driver does in MIG mode
        return SimpleNamespace(gpu=handle.util, memory=0)

    def nvmlDeviceGetTotalEccErrors(self, handle: FakeGpu, error_type: int, counter: int) -> int:  # noqa: N802
        self._check(handle, "nvmlDeviceGetTotalEccErrors")
        assert (error_type, counter) == (1, 0), "must ask for uncorrected volatile errors"
        if handle.ecc is None:
            raise NVMLError_NotSupported()
        return handle.ecc

    def nvmlDeviceGetMigMode(self, handle: FakeGpu) -> list[int]:  # noqa: N802
        self._check(handle, "nvmlDeviceGetMigMode")
        if handle.mig is None:
            raise NVMLError_NotSupported()
        return [1, 1] if handle.mig else [0, 0]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: FakeGpu) -> int:  # noqa: N802
        return handle.mig_slots

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: FakeGpu, slot: int) -> dict[str, Any]:  # noqa: N802
        if not handle.mig or slot >= len(handle.mig):
            raise NVMLError_NotFound()
        uuid, profile, mib = handle.mig[slot]
        return {"uuid": uuid, "name": f"{handle.name} MIG {profile}", "mib": mib}


def _two_gpus_one_mig() -> FakeNvml:
    return FakeNvml([
        FakeGpu("NVIDIA H100 80GB HBM3", "GPU-aaaa", 81559, used_mib=2048, util=37, ecc=0),
        FakeGpu("NVIDIA A100-SXM4-40GB", "GPU-bbbb", 40960, ecc=None,
                mig=[("MIG-b0", "3g.20gb", 19968), ("MIG-b1", "2g.10gb", 9728), ("MIG-b2", "1g.5gb", 4864)]),
    ])  # fmt: skip


def test_nvml_discovers_two_gpus_one_in_mig_mode_one_without_ecc() -> None:
    nvml = _two_gpus_one_mig()
    with NvmlDiscovery(nvml=nvml) as discovery:
        h100, a100 = discovery.discover()
    assert (h100.index, h100.uuid, h100.name, h100.type_name) == (0, "GPU-aaaa", "NVIDIA H100 80GB HBM3", "H100-80GB")
    assert (h100.memory_total_mib, h100.memory_used_mib, h100.utilization_pct, h100.ecc_errors) == (81559, 2048, 37, 0)
    assert h100.mig_mode is False and h100.mig_devices == []
    assert h100.healthy and h100.field_errors == {}

    assert a100.type_name == "A100-40GB"
    assert a100.ecc_errors is None and "ecc" not in a100.field_errors  # unsupported is not a fault
    assert a100.mig_mode is True
    assert [(m.uuid, m.profile, m.memory_total_mib) for m in a100.mig_devices] == [
        ("MIG-b0", "3g.20gb", 19968), ("MIG-b1", "2g.10gb", 9728), ("MIG-b2", "1g.5gb", 4864),
    ]  # fmt: skip
    assert a100.utilization_pct is None and a100.field_errors == {"utilization": "Not Supported"}
    assert a100.healthy
    assert (nvml.inits, nvml.shutdowns) == (1, 1)


def test_a_device_whose_memory_cannot_be_read_is_unhealthy_with_the_reason() -> None:
    nvml = _two_gpus_one_mig()
    nvml.gpus[0].fail = {"nvmlDeviceGetMemoryInfo": NVMLError_Unknown()}
    first, second = NvmlDiscovery(nvml=nvml).discover()
    assert not first.healthy and first.unhealthy_reason == "cannot read memory: Unknown Error"
    assert first.memory_total_mib is None and first.uuid == "GPU-aaaa"
    assert first.type_name == "H100-80GB"  # the name alone still tells an H100 family with one size
    assert second.healthy


def test_a_lost_gpu_and_an_unopenable_one_are_unhealthy_and_the_rest_still_reported() -> None:
    nvml = FakeNvml([
        FakeGpu("NVIDIA L4", "GPU-l4", 23034, fail={"nvmlDeviceGetUtilizationRates": NVMLError_GpuIsLost()}),
        FakeGpu("NVIDIA L4", "GPU-l4b", 23034, fail={"nvmlDeviceGetHandleByIndex": NVMLError_Unknown()}),
        FakeGpu("NVIDIA L4", "GPU-l4c", 23034, ecc=3),
        FakeGpu("NVIDIA L4", "GPU-l4d", 23034, fail={"nvmlDeviceGetName": NVMLError_Unknown()}),
    ])  # fmt: skip
    lost, unopenable, ecc, nameless = NvmlDiscovery(nvml=nvml).discover()
    assert not lost.healthy and "GPU is lost" in (lost.unhealthy_reason or "")
    assert not unopenable.healthy and unopenable.unhealthy_reason == "cannot open device: Unknown Error"
    assert not ecc.healthy and "3 uncorrected ECC errors" in (ecc.unhealthy_reason or "")
    assert nameless.healthy and nameless.name is None and nameless.type_name == "unknown"
    assert nameless.field_errors == {"name": "Unknown Error"}


def test_sample_reports_the_changing_fields() -> None:
    nvml = _two_gpus_one_mig()
    discovery = NvmlDiscovery(nvml=nvml)
    nvml.gpus[0].util = 90
    h100, a100 = discovery.sample()
    assert (h100.uuid, h100.memory_used_mib, h100.utilization_pct, h100.ecc_errors, h100.healthy) == (
        "GPU-aaaa", 2048, 90, 0, True,
    )  # fmt: skip
    assert a100.ecc_errors is None
    discovery.sample()
    assert nvml.inits == 1  # NVML stays open between heartbeats
    discovery.close()
    assert nvml.shutdowns == 1


def test_missing_nvml_library_is_a_clear_error() -> None:
    nvml = FakeNvml([], init_error=NVMLError_LibraryNotFound())
    with pytest.raises(NvmlUnavailable) as refused:
        NvmlDiscovery(nvml=nvml).discover()
    message = str(refused.value)
    assert message.startswith("NVML is not available: NVML Shared Library Not Found")
    assert message.endswith("use --simulate to run without GPUs")


def test_real_pynvml_on_a_machine_without_gpus_raises_the_clear_error() -> None:
    pynvml = pytest.importorskip("pynvml")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("this machine has a working NVIDIA driver")
    with pytest.raises(NvmlUnavailable, match="NVML is not available: .*; use --simulate to run without GPUs"):
        NvmlDiscovery().discover()


def test_nvml_check_script_exits_1_with_the_clear_error_without_gpus() -> None:
    pynvml = pytest.importorskip("pynvml")
    try:
        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        pytest.skip("this machine has a working NVIDIA driver")
    except pynvml.NVMLError:
        pass
    done = subprocess.run([sys.executable, str(REPO / "deploy/checks/nvml_check.py")],
                          capture_output=True, text=True, timeout=60, cwd="/")  # fmt: skip
    assert done.returncode == 1
    assert "NVML is not available" in done.stderr and "--simulate" in done.stderr


def test_nvml_check_script_prints_the_gpus_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    sys.path.insert(0, str(REPO / "deploy/checks"))
    try:
        import nvml_check
    finally:
        sys.path.remove(str(REPO / "deploy/checks"))
    assert nvml_check.main(NvmlDiscovery(nvml=_two_gpus_one_mig())) == 0
    report = json.loads(capsys.readouterr().out)
    assert [g["type_name"] for g in report["gpus"]] == ["H100-80GB", "A100-40GB"]
    assert report["gpus"][1]["mig_devices"][0]["profile"] == "3g.20gb"
    assert len(report["samples"]) == 2


# -- the simulated inventory --


def test_simulated_gpus_have_stable_uuids_catalogue_memory_and_the_load_the_agent_sets() -> None:
    types = parse_simulate("2xH100-80GB,1xA100-40GB")
    sim = SimulatedDiscovery(types, "node-a", mig_layouts={2: ["3g.20gb", "2g.10gb", "1g.5gb"]})
    sim.set_load(1, 0.42, memory_used_mib=30_000)
    gpus = sim.discover()
    assert [g.uuid for g in gpus] == ["GPU-sim-node-a-0", "GPU-sim-node-a-1", "GPU-sim-node-a-2"]
    assert gpus[0].memory_total_mib == 80 * 1024 and gpus[0].utilization_pct == 0
    assert (gpus[1].utilization_pct, gpus[1].memory_used_mib) == (42, 30_000)
    assert gpus[2].mig_mode and [m.profile for m in gpus[2].mig_devices] == ["3g.20gb", "2g.10gb", "1g.5gb"]
    assert gpus[2].mig_devices[0].uuid == "MIG-sim-node-a-2-0"
    assert [g.uuid for g in SimulatedDiscovery(types, "node-a").discover()] == [g.uuid for g in gpus]
    sim.set_health(0, "drill: XID 79")
    assert [(m.healthy, m.unhealthy_reason) for m in sim.sample()][0] == (False, "drill: XID 79")


def test_simulated_mig_layouts_that_no_gpu_accepts_are_refused() -> None:
    with pytest.raises(ValueError, match="needs 8 compute slices"):
        SimulatedDiscovery(parse_simulate("H100-80GB"), "n", mig_layouts={0: ["4g.40gb", "4g.40gb"]})
    with pytest.raises(ValueError, match="has no MIG profile '1g.10gb'; it has: none"):
        SimulatedDiscovery(parse_simulate("L4-24GB"), "n", mig_layouts={0: ["1g.10gb"]})
    with pytest.raises(ValueError, match="no simulated GPU 3"):
        SimulatedDiscovery(parse_simulate("H100-80GB"), "n", mig_layouts={3: ["1g.10gb"]})
