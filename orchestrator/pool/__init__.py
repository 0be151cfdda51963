"""The placement engine: pure, deterministic and fast; the pool service feeds it state.

decision = place(fleet, request)          # filters, then scores; reads only
booking = fleet.apply(decision, tokens)   # counts as load at once (no thundering herd)
fleet.release(booking)                    # the lease ended, or the placement was abandoned
"""

from .decision import Candidate, Decision, PlacementRequest, ScoredCandidate
from .fleet import Booking, Device, FleetState, ModelSpec, Node, Replica, StaleDecision, Tenant
from .placement import place
from .scorers import SCORERS
from .weights import DEFAULT_CONFIG, PlacementConfig, ScorerWeights, tuned

__all__ = [
    "DEFAULT_CONFIG",
    "SCORERS",
    "Booking",
    "Candidate",
    "Decision",
    "Device",
    "FleetState",
    "ModelSpec",
    "Node",
    "PlacementConfig",
    "PlacementRequest",
    "Replica",
    "ScoredCandidate",
    "ScorerWeights",
    "StaleDecision",
    "Tenant",
    "place",
    "tuned",
]
