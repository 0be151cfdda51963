"""What an interrupted step stays away from when it is placed again: the recovery rules a task names.

The rules are data (a task names them in its spec, `TaskSpec.recovery`) and each is a pure function of the
interruption, so the workflow that places real steps and the simulator that replays a fleet's day apply the
very same ones: a rule tuned in the simulator behaves the same in production.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

# lost: the node stopped heartbeating or never picked the call up, and the control plane has evidence it is
# gone; notice: it was told to stop (a spot reclaim, a drain); stalled: the generation's heartbeats went quiet
# while the node is provably alive (a busy machine); replica_gone: the node no longer runs the replica;
# simulated: an operator's test preemption; revoked: the control plane stopped trusting the node.
InterruptionKind = Literal["lost", "notice", "stalled", "replica_gone", "simulated", "revoked"]
RecoveryRule = Literal["avoid_node", "avoid_spot_zone"]


@dataclass(frozen=True)
class Cut:
    """One interruption of a step, as the recovery rules see it."""

    kind: InterruptionKind
    node_id: str
    zone: str | None
    capacity: Literal["on-demand", "spot"]


@dataclass(frozen=True)
class Avoid:
    """Where the step's next placements should not go: nodes kept out, zones whose spot nodes come last."""

    nodes: frozenset[str] = frozenset()
    spot_zones: frozenset[str] = frozenset()

    def __or__(self, other: Avoid) -> Avoid:
        return Avoid(self.nodes | other.nodes, self.spot_zones | other.spot_zones)


def avoid_node(cut: Cut) -> Avoid:
    """A node that went (or is going) away is not placed on again for a while. A node that only lost the
    replica, or is merely slow, is still the best place for the step."""
    if cut.kind in ("replica_gone", "stalled"):
        return Avoid()
    return Avoid(nodes=frozenset({cut.node_id}))


def avoid_spot_zone(cut: Cut) -> Avoid:
    """A cloud reclaims a zone's spot capacity together: after one spot node of a zone goes, its neighbours
    are likely next, so the step's spot placements go elsewhere while anything else can serve."""
    if cut.kind in ("lost", "notice") and cut.capacity == "spot" and cut.zone:
        return Avoid(spot_zones=frozenset({cut.zone}))
    return Avoid()


RECOVERY_RULES: dict[RecoveryRule, Callable[[Cut], Avoid]] = {
    "avoid_node": avoid_node,
    "avoid_spot_zone": avoid_spot_zone,
}
DEFAULT_RECOVERY: tuple[RecoveryRule, ...] = ("avoid_node", "avoid_spot_zone")


def avoid_after(rules: Iterable[RecoveryRule], cut: Cut) -> Avoid:
    """What the named rules together keep the step away from after `cut`."""
    avoid = Avoid()
    for rule in rules:
        avoid = avoid | RECOVERY_RULES[rule](cut)
    return avoid
