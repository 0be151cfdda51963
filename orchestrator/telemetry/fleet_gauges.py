"""The fleet's state as observable gauges: GPU memory, utilization, ECC errors and health, replicas by state.

Observable, not recorded: the figures are read when a scraper (or the OTLP reader's timer) asks, from
whatever the process knows — the store's fleet table on the control plane, its own GPU discovery on a
node agent. One process watches one fleet view; `watch_fleet` replaces it, so a test (or a restarted app)
does not leave a reader on a closed store behind.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Observation

from sdk.wire.fleet import NodeView

MIB = 1024 * 1024


@dataclass(frozen=True)
class GpuReading:
    """One GPU's latest figures; None where the driver (or the last heartbeat) did not report one."""

    node: str
    datacenter: str
    gpu: int
    type_name: str
    memory_used_mib: int | None
    memory_total_mib: int | None
    utilization_pct: int | None
    ecc_errors: int | None
    healthy: bool
    held: bool = False  # a replica holds it (the admin UI's "busy")


@dataclass(frozen=True)
class FleetReading:
    gpus: list[GpuReading] = field(default_factory=list)
    # (model, state, node, datacenter) -> how many replicas
    replicas: Counter[tuple[str, str, str, str]] = field(default_factory=Counter)


def fleet_reading(nodes: Iterable[NodeView]) -> FleetReading:
    """The control plane's view: every node's GPUs as of its last heartbeat, and its replicas (the admin UI's
    overview counts from this same reading, so its page and /metrics never disagree)."""
    reading = FleetReading()
    for node in nodes:
        held = {i for r in node.replicas for i in r.gpu_indexes}
        for gpu in node.gpus:
            reading.gpus.append(
                GpuReading(
                    node.node_id,
                    node.datacenter,
                    gpu.index,
                    gpu.type_name,
                    gpu.memory_used_mib,
                    gpu.memory_total_mib,
                    gpu.utilization_pct,
                    gpu.ecc_errors,
                    gpu.healthy,
                    gpu.index in held,
                )
            )
        reading.replicas.update((r.model, r.state, node.node_id, node.datacenter) for r in node.replicas)
    return reading


_read: Callable[[], FleetReading] = FleetReading


def watch_fleet(read: Callable[[], FleetReading]) -> None:
    """Make `read` the source of this process's fleet gauges (called once per scrape)."""
    global _read
    _read = read


def _gpu_observations(
    value: Callable[[GpuReading], float | None],
) -> Callable[[CallbackOptions], Iterator[Observation]]:
    def observe(_options: CallbackOptions) -> Iterator[Observation]:
        for gpu in _read().gpus:
            if (figure := value(gpu)) is not None:
                yield Observation(
                    figure,
                    {"node": gpu.node, "datacenter": gpu.datacenter, "gpu": str(gpu.gpu), "gpu_type": gpu.type_name},
                )

    return observe


def _replica_observations(_options: CallbackOptions) -> Iterator[Observation]:
    for (model, state, node, datacenter), count in _read().replicas.items():
        yield Observation(count, {"model": model, "state": state, "node": node, "datacenter": datacenter})


def _mib_as_bytes(mib: int | None) -> int | None:
    return None if mib is None else mib * MIB


_meter = metrics.get_meter("berth.fleet")
_meter.create_observable_gauge(
    "berth_gpu_memory_used_bytes",
    [_gpu_observations(lambda g: _mib_as_bytes(g.memory_used_mib))],
    unit="By",
    description="GPU memory in use",
)
_meter.create_observable_gauge(
    "berth_gpu_memory_total_bytes",
    [_gpu_observations(lambda g: _mib_as_bytes(g.memory_total_mib))],
    unit="By",
    description="GPU memory in all",
)
_meter.create_observable_gauge(
    "berth_gpu_utilization_ratio",
    [_gpu_observations(lambda g: None if g.utilization_pct is None else g.utilization_pct / 100)],
    unit="1",
    description="share of time the GPU ran kernels (NVML reports none in MIG mode)",
)
_meter.create_observable_gauge(
    "berth_gpu_ecc_errors",
    [_gpu_observations(lambda g: g.ecc_errors)],
    unit="{error}",
    description="uncorrected ECC errors since the driver loaded",
)
_meter.create_observable_gauge(
    "berth_gpu_healthy",
    [_gpu_observations(lambda g: 1 if g.healthy else 0)],
    unit="1",
    description="1 when the GPU is healthy, 0 when discovery found it unhealthy",
)
_meter.create_observable_gauge(
    "berth_replicas", [_replica_observations], unit="{replica}", description="replicas by model and state"
)
