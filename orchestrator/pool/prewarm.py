"""Which nodes a prewarm should put a model's weights on, and where each fetches them from.

Prewarming moves weights to local disk ahead of demand, so a later load is a disk load (size ÷
disk bandwidth) instead of a datacenter or origin fetch (the locality tiers of docs/weights.md). It is
worth doing only on a node that could later load the model: a node that can never hold it in
GPU memory, or whose cache is smaller than the weights, would spend bandwidth and disk for
nothing. Pure: it reads node views, starts nothing.
"""

from __future__ import annotations

from sdk.wire.catalogue import ModelEntry
from sdk.wire.fleet import UNADMITTED, GpuView, NodeView
from sdk.wire.node_io import FetchSource

from ..weights_transfer import GIB

MIB_PER_GIB = 1024
# A node this far gone cannot serve its disk to a peer, and one outside the fleet (pending, revoked) is
# trusted with nothing; any other node caching the weights can.
_UNREADABLE = frozenset({"lost"}) | UNADMITTED


class PrewarmRefused(ValueError):
    """A prewarm that cannot be planned; `field` names the input to blame ("model" or "datacenter")."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def weights_bytes(entry: ModelEntry) -> int:
    """The weights' size on disk, as the node agent's cache counts it."""
    return round(entry.weights_gib * GIB)


def prewarm_targets(nodes: list[NodeView], entry: ModelEntry, datacenter: str | None) -> list[tuple[str, FetchSource]]:
    """(node id, where it fetches from) for each node worth prewarming, ordered by node id.

    A target is healthy, in `datacenter` when one is given, lacks the weights on disk, has a
    weights cache that can hold them (the cache evicts to make room, so its capacity is what
    counts), and has GPUs that could hold the model at one of its tensor-parallel degrees, all
    on that node. It fetches from "datacenter" when another node there already caches the
    weights (intra-DC bandwidth), else from "origin".
    """
    if entry.provider == "hosted":
        raise PrewarmRefused("model", f"{entry.name} is served by its provider; it has no weights to prewarm")
    if datacenter is not None and not any(n.datacenter == datacenter for n in nodes):
        raise PrewarmRefused("datacenter", f"no node of the fleet is in datacenter {datacenter!r}")
    size = weights_bytes(entry)
    caching_dcs = {n.datacenter for n in nodes if n.status not in _UNREADABLE and _caches(n, entry.name)}
    targets: list[tuple[str, FetchSource]] = []
    for node in sorted(nodes, key=lambda n: n.node_id):
        if (
            node.status != "healthy"
            or (datacenter is not None and node.datacenter != datacenter)
            or _caches(node, entry.name)
            or node.weights_cache_capacity_bytes < size
            or not _fits_on_gpus(node.gpus, entry)
        ):
            continue
        targets.append((node.node_id, "datacenter" if node.datacenter in caching_dcs else "origin"))
    return targets


def _caches(node: NodeView, model: str) -> bool:
    return any(w.model == model for w in node.cached_weights)


def _fits_on_gpus(gpus: list[GpuView], entry: ModelEntry) -> bool:
    """Whether some allowed degree d finds d healthy GPUs of this node each holding need ÷ d.

    A MIG instance is a device of its own but never joins a tensor-parallel gang, so it counts
    for degree 1 only; a GPU whose memory is unknown counts for nothing.
    """
    whole = [
        g.memory_total_mib / MIB_PER_GIB
        for g in gpus
        if g.healthy and not g.mig_mode and g.memory_total_mib is not None
    ]
    instances = [
        m.memory_total_mib / MIB_PER_GIB
        for g in gpus
        if g.healthy and g.mig_mode
        for m in g.mig_devices
        if m.memory_total_mib is not None
    ]
    need = entry.memory_need_gib
    for degree in entry.tensor_parallel:
        devices = whole + instances if degree == 1 else whole
        if sum(1 for gib in devices if gib >= need / degree) >= degree:
            return True
    return False
