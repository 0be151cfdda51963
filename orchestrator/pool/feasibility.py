"""Could a model ever be served? Asked of the GPU catalogue when a model is added, and of the
fleet at submission, so an impossible task fails at once instead of queueing forever.

Only hardware counts (whatever the nodes' health or load): a busy or briefly unhealthy fleet
makes a task wait, never fail. A fleet with no nodes yet answers "maybe": nodes join after
the control plane starts; so does one with join tokens still unused, whose machines are on their way. A node pending approval or revoked is not part of the fleet: a rogue
machine's claimed GPUs must not make a task no admitted node could hold look servable.
"""

from __future__ import annotations

from sdk.wire.catalogue import TENSOR_PARALLEL_DEGREES, ModelEntry
from sdk.wire.fleet import UNADMITTED, NodeView

from ..node.gpu_types import GPU_TYPES
from .decision import PlacementRequest
from .fleet import FleetState
from .inventory import model_spec, node_from_view
from .reasons import never_possible


def never_reason(nodes: list[NodeView], entry: ModelEntry, joining: int = 0) -> str | None:
    """Why no node of `nodes` could ever hold `entry`, or None when one could, none has joined, or `joining`
    machines hold join tokens they have not used yet (a fleet still forming, as right after `berth up`
    starts its nodes, may yet hold it: refusing then refused tasks that the next node to join could run)."""
    nodes = [view for view in nodes if view.status not in UNADMITTED]
    if entry.provider != "self-hosted" or not nodes or joining > 0:
        return None
    fleet = FleetState()
    for view in nodes:
        fleet.add_node(node_from_view(view))
    spec = model_spec(entry)
    return never_possible(fleet, PlacementRequest(model=entry.name, tokens=1), spec, "shared")


def unservable_by_any_gpu(entry: ModelEntry) -> str | None:
    """Why no GPU type Berth knows could hold `entry` at any of its allowed degrees, or None."""
    if entry.provider != "self-hosted":
        return None
    largest = max(GPU_TYPES.values(), key=lambda g: g.memory_gib)
    if any(entry.memory_need_gib / d <= largest.memory_gib for d in entry.tensor_parallel):
        return None
    widest = max(entry.tensor_parallel)
    need = entry.memory_need_gib / widest
    hint = next((d for d in TENSOR_PARALLEL_DEGREES if entry.memory_need_gib / d <= largest.memory_gib), None)
    way_out = f"; allow tensor_parallel {hint}" if hint is not None else "; no tensor-parallel degree makes it fit"
    return (
        f"{entry.name} needs {entry.memory_need_gib:g} GiB ({need:g} GiB per GPU at tensor_parallel {widest});"
        f" the largest GPU type, {largest.name}, has {largest.memory_gib:g} GiB{way_out}"
    )
