"""The GPU and replica gauges: a node's NVML readings (through the fake NVML of test_gpu_discovery) and the
control plane's fleet table map to the same metrics; a node serves them on its own port."""

from __future__ import annotations

import socket
import uuid
from datetime import UTC, datetime

import httpx
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from prometheus_client.parser import text_string_to_metric_families
from test_gpu_discovery import MIB, FakeGpu, FakeNvml

from orchestrator.node import NvmlDiscovery
from orchestrator.node.metrics import node_reading, serve_node_metrics
from orchestrator.telemetry.fleet_gauges import fleet_reading, watch_fleet
from sdk.wire.fleet import GpuView, NodeView, ReplicaReport, ReplicaView

GPU_METRICS = (
    "berth_gpu_memory_used_bytes",
    "berth_gpu_memory_total_bytes",
    "berth_gpu_utilization_ratio",
    "berth_gpu_ecc_errors",
    "berth_gpu_healthy",
)


def readings(reader: InMemoryMetricReader, node: str) -> dict[tuple[str, str], float]:
    """(metric, gpu or model/state) -> value, for the series of `node`."""
    found: dict[tuple[str, str], float] = {}
    for rm in reader.get_metrics_data().resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                for p in m.data.data_points:
                    if p.attributes.get("node") == node:
                        key = p.attributes.get("gpu") or f"{p.attributes['model']}/{p.attributes['state']}"
                        found[(m.name, str(key))] = p.value
    return found


def test_nvml_readings_map_to_the_gpu_gauges(metrics_reader: InMemoryMetricReader) -> None:
    node = f"gpu-{uuid.uuid4().hex[:6]}"
    nvml = FakeNvml(
        [
            FakeGpu("NVIDIA H100 80GB HBM3", "GPU-aaaa", 81559, used_mib=2048, util=37, ecc=3),
            FakeGpu("NVIDIA L4", "GPU-bbbb", 23034, used_mib=0, util=0, ecc=None),
        ]
    )
    replicas = [ReplicaReport(replica_id="r-1", model="llama-3.2-1b", gpu_indexes=[0], state="warm")]
    with NvmlDiscovery(nvml=nvml) as discovery:
        watch_fleet(lambda: node_reading(node, "dc1", discovery.discover(), replicas))
        seen = readings(metrics_reader, node)

    assert seen[("berth_gpu_memory_used_bytes", "0")] == 2048 * MIB
    assert seen[("berth_gpu_memory_total_bytes", "0")] == 81559 * MIB
    assert seen[("berth_gpu_utilization_ratio", "0")] == 0.37
    assert seen[("berth_gpu_ecc_errors", "0")] == 3
    assert ("berth_gpu_ecc_errors", "1") not in seen  # no ECC on the L4: no series, not a zero
    # Discovery takes uncorrected ECC errors for a sick GPU.
    assert seen[("berth_gpu_healthy", "0")] == 0 and seen[("berth_gpu_healthy", "1")] == 1
    assert seen[("berth_replicas", "llama-3.2-1b/warm")] == 1


def test_the_fleet_table_maps_to_the_same_gauges(metrics_reader: InMemoryMetricReader) -> None:
    node = f"gpu-{uuid.uuid4().hex[:6]}"
    view = NodeView(
        node_id=node,
        datacenter="dc1",
        zone="z1",
        capacity="spot",
        usd_per_hour=2.0,
        disk_bandwidth_gbps=2.0,
        status="healthy",
        registered_at=datetime.now(UTC),
        gpus=[
            GpuView(
                index=0,
                type_name="H100-80GB",
                memory_total_mib=81559,
                memory_used_mib=100,
                utilization_pct=50,
                ecc_errors=1,
                healthy=False,
                reason="ECC errors",
            )
        ],
        replicas=[
            ReplicaView(
                replica_id=f"r-{i}", node_id=node, datacenter="dc1", zone="z1", model="m", gpu_indexes=[0], state=state
            )
            for i, state in enumerate(["warm", "warm", "loading"])
        ],
    )
    watch_fleet(lambda: fleet_reading([view]))
    seen = readings(metrics_reader, node)

    assert {name for name, _ in seen} >= set(GPU_METRICS)
    assert seen[("berth_gpu_healthy", "0")] == 0 and seen[("berth_gpu_ecc_errors", "0")] == 1
    assert seen[("berth_replicas", "m/warm")] == 2 and seen[("berth_replicas", "m/loading")] == 1
    # The admin UI's overview counts "busy" GPUs from this same reading: those a replica holds.
    two = view.model_copy(update={"gpus": [*view.gpus, GpuView(index=1, type_name="H100-80GB")]})
    assert [g.held for g in fleet_reading([two]).gpus] == [True, False]


def test_a_node_serves_its_gpus_on_its_metrics_port(metrics_reader: InMemoryMetricReader) -> None:
    node = f"gpu-{uuid.uuid4().hex[:6]}"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    nvml = FakeNvml([FakeGpu("NVIDIA H100 80GB HBM3", "GPU-aaaa", 81559, used_mib=512, util=5, ecc=0)])
    serve_node_metrics("127.0.0.1", port, node, "dc1", NvmlDiscovery(nvml=nvml), list)

    text = httpx.get(f"http://127.0.0.1:{port}/metrics").text
    totals = [
        s.value
        for f in text_string_to_metric_families(text)
        if f.name == "berth_gpu_memory_total_bytes"
        for s in f.samples
        if s.labels.get("node") == node
    ]
    assert totals == [81559 * MIB]
