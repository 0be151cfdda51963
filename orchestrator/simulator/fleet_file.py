"""The simulated fleet: nodes (GPU types, datacenters, zones, spot or on-demand, prices, disks) and the
network the weights travel over, from a JSON file.

The nodes are `berth up --fleet`'s entries with three more fields: `count` (that many alike nodes,
named `<node_id>-1` … `<node_id>-N`), the node's disk read speed and its weights cache size. The
file is either that list alone (the network takes Berth's defaults) or an object:

    {"network": {"wan_gib_per_s": 0.5, "intra_dc_gib_per_s": 2.5, "engine_start_s": 20},
     "nodes": [{"node_id": "h100-east", "count": 4, "datacenter": "east", "zone": "east-1a",
                "capacity": "on-demand", "gpus": "8xH100-80GB", "disk_gib_per_s": 5.6}]}
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..node.gpu_types import parse_simulate
from ..pool.fleet import Device, Node
from ..pool.weights import DEFAULT_CONFIG, PlacementConfig
from ..stack.fleet import SimulatedNode
from ..weights_transfer import DISK_BYTES_PER_S, GIB
from .json_input import field_errors, read_json

# The standard fleet is 12 nodes; a 12,000-node fleet (96,000 GPUs) took ~10 s for the bursty scenario here,
# most of it the calls, not the nodes. Past that, nodes cost memory and time without end (a 100,000-node file
# ran without bound): ten thousand nodes, one group's own limit, and 8 GPUs for each of them bound a run.
MAX_FLEET_NODES = 10_000
MAX_FLEET_GPUS = 8 * MAX_FLEET_NODES


class Network(BaseModel):
    """How fast weights reach a GPU: the placement scorers' figures and the simulated loads' alike."""

    model_config = ConfigDict(extra="forbid")

    wan_gib_per_s: float = Field(
        default=DEFAULT_CONFIG.wan_gib_per_s,
        gt=0,
        le=1000,
        description="from the model's origin (an object store or hub)",
    )
    intra_dc_gib_per_s: float = Field(
        default=DEFAULT_CONFIG.intra_dc_gib_per_s, gt=0, le=1000, description="from another node of the same datacenter"
    )
    engine_start_s: float = Field(
        default=DEFAULT_CONFIG.engine_start_s,
        ge=0,
        le=3600,
        description="the engine's start once weights are read (CUDA graphs, profiling)",
    )


class FleetNodes(SimulatedNode):
    count: int = Field(default=1, ge=1, le=10_000)
    disk_gib_per_s: float = Field(default=DISK_BYTES_PER_S / GIB, gt=0, le=1000)
    disk_cache_gib: float = Field(default=2000.0, gt=0, description="weights kept on local disk (LRU)")


class FleetFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    network: Network = Field(default_factory=Network)
    nodes: list[FleetNodes] = Field(min_length=1)

    def placement_config(self) -> PlacementConfig:
        """Berth's scorer config with this network's figures: placement predicts the loads the fleet will see."""
        return replace(
            DEFAULT_CONFIG,
            wan_gib_per_s=self.network.wan_gib_per_s,
            intra_dc_gib_per_s=self.network.intra_dc_gib_per_s,
            engine_start_s=self.network.engine_start_s,
        )

    def expand(self) -> list[tuple[Node, float]]:
        """Every node as placement sees it, with its disk cache size in GiB, in file order."""
        out: list[tuple[Node, float]] = []
        for group in self.nodes:
            ids = [group.node_id] if group.count == 1 else [f"{group.node_id}-{i}" for i in range(1, group.count + 1)]
            gpus = parse_simulate(group.gpus)
            for node_id in ids:
                devices = [
                    Device(
                        index=i,
                        uuid=f"{node_id}/{i}",
                        type_name=g.name,
                        memory_gib=g.memory_gib,
                        speed=g.relative_speed,
                    )
                    for i, g in enumerate(gpus)
                ]
                out.append(
                    (
                        Node(
                            id=node_id,
                            datacenter=group.datacenter,
                            zone=group.zone,
                            capacity=group.capacity,
                            usd_per_hour=group.price,
                            devices=devices,
                            disk_gib_per_s=group.disk_gib_per_s,
                        ),
                        group.disk_cache_gib,
                    )
                )
        return out


def parse_fleet(raw: object, source: str = "fleet") -> FleetFile:
    """A fleet from decoded JSON; ValueError naming the field that is wrong (`fleet.nodes.0.gpus: ...`)."""
    if isinstance(raw, list):
        raw = {"nodes": raw}
    try:
        fleet = FleetFile.model_validate(raw)
    except ValidationError as exc:
        raise field_errors(source, exc) from None
    _within_bounds(fleet, source)
    names = [n.id for n, _ in fleet.expand()]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ValueError(f"{source}.nodes: node {repeated[0]!r} is named twice (node_id and count expand to it)")
    return fleet


def _within_bounds(fleet: FleetFile, source: str) -> None:
    """Counted before the nodes are made, so a fleet too large to simulate is refused at once."""
    nodes = sum(group.count for group in fleet.nodes)
    if nodes > MAX_FLEET_NODES:
        raise ValueError(f"{source}.nodes: {nodes:,} nodes (counts included); at most {MAX_FLEET_NODES:,}")
    gpus = sum(group.count * len(parse_simulate(group.gpus)) for group in fleet.nodes)
    if gpus > MAX_FLEET_GPUS:
        raise ValueError(f"{source}.nodes: {gpus:,} GPUs; at most {MAX_FLEET_GPUS:,}")


def load_fleet_file(path: Path) -> FleetFile:
    return parse_fleet(read_json(path, "fleet"))
