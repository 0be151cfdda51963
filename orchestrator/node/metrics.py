"""The node agent's /metrics: its own GPUs (NVML or the simulator) and replicas, on a port of its own, with
its /healthz and /readyz beside them.

A node agent has no HTTP server otherwise (it talks to the control plane and polls Temporal), so a small
threaded server (`telemetry.probe_server`) serves the process's registry and the agent's probes; port 0 (the
default) serves nothing. The figures are read from discovery at scrape time, so they are as fresh as the scrape, not the
last heartbeat.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from opentelemetry import metrics

from sdk.wire.fleet import ReplicaReport

from ..telemetry import serve_metrics
from ..telemetry.fleet_gauges import FleetReading, GpuReading, watch_fleet
from ..telemetry.probe_server import Check, ProbeServer
from .discovery import GpuDiscovery, GpuInfo

# A small model from a warm disk loads in seconds; a 70B model from the origin takes minutes.
LOAD_BUCKETS_S = [1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600, 1200]

_load = metrics.get_meter("berth.node").create_histogram(
    "berth_replica_load_seconds",
    unit="s",
    description="from a replica's start to serving, by where its weights came from",
    explicit_bucket_boundaries_advisory=LOAD_BUCKETS_S,
)


_fetched_bytes = metrics.get_meter("berth.node").create_counter(
    "berth_weights_fetched_bytes", unit="By", description="real weights fetched into the node's cache, by source tier"
)
_fetch = metrics.get_meter("berth.node").create_histogram(
    "berth_weights_fetch_seconds",
    unit="s",
    description="a revision's fetch into the node's cache, by source tier",
    explicit_bucket_boundaries_advisory=LOAD_BUCKETS_S,
)


def record_fetch(model: str, tier: str, size_bytes: int, seconds: float) -> None:
    """Real weights fetched: `size_bytes` from `tier` in `seconds`, measured."""
    _fetched_bytes.add(size_bytes, {"model": model, "tier": tier})
    _fetch.record(seconds, {"model": model, "tier": tier})


def record_load(model: str, tier: str, seconds: float) -> None:
    """A replica turned warm after `seconds`, its weights from `tier` (disk, datacenter, origin)."""
    _load.record(seconds, {"model": model, "tier": tier})


def node_reading(node_id: str, datacenter: str, gpus: list[GpuInfo], replicas: list[ReplicaReport]) -> FleetReading:
    """One node's GPUs and replicas as the fleet gauges show them."""
    held = {i for r in replicas for i in r.gpu_indexes}
    return FleetReading(
        gpus=[
            GpuReading(
                node_id,
                datacenter,
                g.index,
                g.type_name,
                g.memory_used_mib,
                g.memory_total_mib,
                g.utilization_pct,
                g.ecc_errors,
                g.healthy,
                g.index in held,
            )
            for g in gpus
        ],
        replicas=Counter((r.model, r.state, node_id, datacenter) for r in replicas),
    )


def serve_node_metrics(
    host: str,
    port: int,
    node_id: str,
    datacenter: str,
    discovery: GpuDiscovery,
    replicas: Callable[[], list[ReplicaReport]],
    ready: Check | None = None,
) -> ProbeServer | None:
    """Watch this node's GPUs and replicas; with a port, serve /metrics, /healthz and /readyz (from `ready`) on
    `host`:`port` (port 0: serve nothing). The process's MeterProvider is installed by its entry point
    (`berth node`); without one the gauges are no-ops."""
    watch_fleet(lambda: node_reading(node_id, datacenter, discovery.discover(), replicas()))
    return serve_metrics(port, ready=ready, host=host)
