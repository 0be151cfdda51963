"""Could this fleet ever serve a model? Asked at submission, so an impossible task fails at once.

Only the nodes' hardware counts (whatever their health or load): a busy or briefly
unhealthy fleet makes a task wait, never fail. A fleet with no nodes yet answers "maybe":
nodes join after the control plane starts.
"""

from __future__ import annotations

from sdk._catalogue import ModelEntry
from sdk._fleet import NodeView

from .decision import PlacementRequest
from .fleet import FleetState
from .inventory import model_spec, node_from_view
from .reasons import never_possible


def never_reason(nodes: list[NodeView], entry: ModelEntry) -> str | None:
    """Why no node of `nodes` could ever hold `entry`, or None when one could (or none has joined)."""
    if entry.provider != "self-hosted" or not nodes:
        return None
    fleet = FleetState()
    for view in nodes:
        fleet.add_node(node_from_view(view))
    spec = model_spec(entry)
    return never_possible(fleet, PlacementRequest(model=entry.name, tokens=1), spec, "shared")
