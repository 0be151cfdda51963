"""Learned bandwidths: how fast weights really reach each node, from each tier, by what nodes measured.

The configured rates (orchestrator/weights_transfer.py, `PlacementConfig`) are the prior; every measured
transfer moves the estimate (`learned_bytes_per_s`: halfway, in log space). Kept per key:
- `disk`, per node: its own reads of cached weights (a heartbeat's `transfers`); prior: the disk bandwidth it
  registered;
- `origin`, per node: its own fills from the model's origin (heartbeats); prior: the configured WAN rate;
- `peer`, per *source* node: copies out of it, measured by the nodes that received them (ticket reports, which
  only a copy the control plane authorised can carry); prior: the configured datacenter rate. A peer's uplink
  is shared by everything it serves, so its rate is the source's, whoever asked.

The datacenter tier of a candidate node is as fast as the best peer of its datacenter that holds the model (the
control plane's ticket names that one): a slow peer therefore makes the datacenter tier slow, and a fast origin
can win over it. With nothing measured every rate is its prior exactly, so placement is what it was.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from ..weights_transfer import DISK_BYTES_PER_S, GIB, learned_bytes_per_s

if TYPE_CHECKING:
    from .fleet import FleetState, Node
    from .weights import PlacementConfig


class Measured(Protocol):
    """One measured transfer (store.peers.MeasuredTransfer). Read-only: the samples are frozen."""

    @property
    def id(self) -> int: ...
    @property
    def node_id(self) -> str: ...
    @property
    def tier(self) -> str: ...
    @property
    def source_node(self) -> str | None: ...
    @property
    def bytes(self) -> int: ...
    @property
    def seconds(self) -> float: ...


@dataclass
class LearnedBandwidth:
    """Bytes/s estimates by (tier, node); `last_id` is the last sample folded in (samples replay in id order)."""

    disk: dict[str, float] = field(default_factory=dict)
    origin: dict[str, float] = field(default_factory=dict)
    peer: dict[str, float] = field(default_factory=dict)  # by source node
    last_id: int = 0
    # The highest rate ever learned per tier (bytes/s), only ever raised: bounds that stay true (scorers.py).
    fastest_disk: float = 0.0
    fastest_origin: float = 0.0
    fastest_peer: float = 0.0

    def observe(self, samples: Iterable[Measured], fleet: FleetState, config: PlacementConfig) -> int:
        """Fold `samples` in (oldest first); how many were new."""
        n = 0
        for s in samples:
            if s.id <= self.last_id:
                continue
            self.last_id = s.id
            n += 1
            if s.tier == "disk":
                node = fleet.nodes.get(s.node_id)
                prior = node.disk_gib_per_s * GIB if node is not None else DISK_BYTES_PER_S
                _learn(self.disk, s.node_id, prior, s)
                self.fastest_disk = max(self.fastest_disk, self.disk[s.node_id])
            elif s.tier == "origin":
                _learn(self.origin, s.node_id, config.wan_gib_per_s * GIB, s)
                self.fastest_origin = max(self.fastest_origin, self.origin[s.node_id])
            elif s.tier == "datacenter" and s.source_node:
                _learn(self.peer, s.source_node, config.intra_dc_gib_per_s * GIB, s)
                self.fastest_peer = max(self.fastest_peer, self.peer[s.source_node])
        return n

    # -- what the scorers read (GiB/s, as the config's figures) --

    def disk_gib_per_s(self, node: Node) -> float:
        learned = self.disk.get(node.id)
        return node.disk_gib_per_s if learned is None else learned / GIB

    def origin_gib_per_s(self, node: Node, config: PlacementConfig) -> float:
        learned = self.origin.get(node.id)
        return config.wan_gib_per_s if learned is None else learned / GIB

    def datacenter_gib_per_s(self, fleet: FleetState, model: str, node: Node, config: PlacementConfig) -> float:
        """The best source of `node`'s datacenter holding `model`: measured ones at their rate, any other at the prior."""
        prior = config.intra_dc_gib_per_s
        if not self.peer:
            return prior
        holders = fleet.cached.get(model, ())
        measured = [
            rate / GIB
            for source, rate in self.peer.items()
            if source != node.id and source in holders and _datacenter(fleet, source) == node.datacenter
        ]
        in_dc = fleet.caching_in(model, node.datacenter) - (1 if node.id in holders else 0)
        if len(measured) < in_dc:
            measured.append(prior)  # a holder nobody has measured yet: as configured
        return max(measured, default=prior)


def _learn(table: dict[str, float], key: str, prior: float, s: Measured) -> None:
    table[key] = learned_bytes_per_s(table.get(key, prior), s.bytes, s.seconds)


def _datacenter(fleet: FleetState, node_id: str) -> str | None:
    node = fleet.nodes.get(node_id)
    return node.datacenter if node is not None else None
