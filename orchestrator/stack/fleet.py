"""The fleet `berth up` starts: a few `berth node` processes with simulated GPUs, and one on this machine's CPU
that serves a real model through llama.cpp.

The default is small but has everything placement weighs: two datacenters, three GPU types,
on-demand and spot capacity. A JSON file (`berth up --fleet FILE`) replaces it:

    [{"node_id": "gpu-a", "datacenter": "east", "zone": "east-1a", "capacity": "on-demand",
      "gpus": "2xH100-80GB"}, ...]

A node's price defaults to its GPUs' typical price for its capacity class (the GPU type
catalogue's figures), so the pool's cost term sees realistic numbers without configuration.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator

from sdk.wire.catalogue import EngineKind
from sdk.wire.fleet import NODE_ID_PATTERN, PLACE_PATTERN

from ..node.gpu_types import CPU_TYPES, parse_simulate


class SimulatedNode(BaseModel):
    model_config = ConfigDict(extra="forbid")

    node_id: str = Field(pattern=NODE_ID_PATTERN)
    datacenter: str = Field(pattern=PLACE_PATTERN)
    zone: str = Field(pattern=PLACE_PATTERN)
    capacity: Literal["spot", "on-demand"] = "on-demand"
    gpus: str = Field(description='as for `berth node --simulate`, e.g. "2xH100-80GB"')
    usd_per_hour: float | None = Field(default=None, ge=0)
    engines: list[EngineKind] | None = Field(
        default=None, description="what it runs; default: llama.cpp on a CPU device, the simulated engine on GPUs"
    )

    @field_validator("gpus")
    @classmethod
    def _known_gpus(cls, gpus: str) -> str:
        parse_simulate(gpus)  # raises ValueError naming the unknown type, refused as nodes.N.gpus
        return gpus

    @property
    def on_cpu(self) -> bool:
        """The host's CPU is its device: its replicas are real llama.cpp processes, nothing simulated."""
        return all(g.name in CPU_TYPES for g in parse_simulate(self.gpus))

    @property
    def runs(self) -> list[str]:
        return list(self.engines) if self.engines is not None else (["llama.cpp"] if self.on_cpu else ["simulated"])

    @property
    def price(self) -> float:
        if self.usd_per_hour is not None:
            return self.usd_per_hour
        gpus = parse_simulate(self.gpus)
        spot = self.capacity == "spot"
        return round(sum(g.usd_per_hour_spot if spot else g.usd_per_hour_on_demand for g in gpus), 3)


DEFAULT_FLEET: tuple[SimulatedNode, ...] = (
    SimulatedNode(node_id="gpu-east-a", datacenter="east", zone="east-1a", gpus="2xH100-80GB"),
    SimulatedNode(node_id="gpu-east-b", datacenter="east", zone="east-1b", capacity="spot", gpus="2xA100-40GB"),
    SimulatedNode(node_id="gpu-west-a", datacenter="west", zone="west-1a", gpus="4xL4-24GB"),
    # This machine's CPU, serving the real model (smollm2-135m) through llama.cpp; it starts once llama.cpp is
    # installed (`make up` builds it in the background on a machine's first run).
    SimulatedNode(node_id="cpu-local", datacenter="east", zone="east-1a", gpus="1xCPU-16GB"),
)


def load_fleet(path: Path) -> list[SimulatedNode]:
    """The nodes of a fleet file; ValueError naming the entry and field that is wrong."""
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"fleet: cannot read {path}: {exc}") from None
    try:
        nodes = TypeAdapter(list[SimulatedNode]).validate_python(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise ValueError(f"fleet.{'.'.join(map(str, err['loc']))}: {err['msg']}") from None
    ids = [n.node_id for n in nodes]
    repeated = sorted({i for i in ids if ids.count(i) > 1})
    if repeated:
        raise ValueError(f"fleet: node_id {repeated[0]!r} is listed more than once")
    if not nodes:
        raise ValueError("fleet: the file lists no nodes")
    return nodes


def node_argv(node: SimulatedNode, load_time_scale: float, heartbeat_s: float) -> list[str]:
    """`berth node` arguments for one simulated node (config comes through BERTH_* variables)."""
    return [
        "node",
        "--node-id",
        node.node_id,
        "--simulate",
        node.gpus,
        "--datacenter",
        node.datacenter,
        "--zone",
        node.zone,
        "--capacity",
        node.capacity,
        "--usd-per-hour",
        repr(node.price),
        "--load-time-scale",
        repr(load_time_scale),
        "--heartbeat-s",
        repr(heartbeat_s),
        "--engines",
        ",".join(node.runs),
        "--peer-port",
        "0",
    ]
