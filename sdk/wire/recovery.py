"""What an interrupted step stays away from when it is placed again (the recovery rules a task names), and what a
timeout on a node means once the evidence about the node is in (the suspect-node rules).

The recovery rules are data (a task names them in its spec, `TaskSpec.recovery`) and each is a pure function of the
interruption; the suspect-node rules (`Suspect`) are a pure function of the timeout, the evidence and what the call
has had so far. The workflow that places real steps (workflows/fleet_recovery.py) and the simulator that replays a
fleet's day (orchestrator/simulator/engine.py) apply the very same ones: a rule tuned in the simulator behaves the
same in production. Nothing here does I/O or imports Temporal.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
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


# ----- suspect nodes: what a timeout on a node means once the evidence about the node is in -----------------------
# A timeout is a suspicion, not a verdict: a call not picked up in time, or a generation whose heartbeats went quiet,
# may be a node that is gone or one that is merely busy. The pool's evidence about the node (alive, gone, unknown)
# decides; these rules say how, and the workflow (workflows/fleet_recovery.py) and the simulator
# (orchestrator/simulator/engine.py) both ask them.

# Times a quiet generation on a live node is continued there (each one attempt of the placement's stride) before the
# step counts it `stalled` and places it elsewhere: an engine that is wedged, not merely slow. Each continuation waits
# one heartbeat timeout more: with the default 5 s, a wedged engine keeps its step 3 × 5 = 15 s past its first silence.
QUIET_CONTINUES = 3
# Pickups a node whose liveness nothing proves (`unknown`) gets before it is taken for gone: the first may be a node
# whose own heartbeat is merely late; after the second it has not polled its queue for 2 × 0.8 × 5 s = 8 s (a pickup
# waits 0.8 of the default 5 s heartbeat timeout), which a busy node's agent does not do.
UNPROVEN_PICKUPS = 2

Liveness = Literal["alive", "gone", "unknown"]  # the pool's evidence about a node (orchestrator/pool/liveness.py)
# heartbeat: the call's heartbeats stopped; pickup: no node picked the call up in time.
NodeTimeout = Literal["heartbeat", "pickup"]
# gone: the step leaves the node (an interruption of kind `lost`); wait_for_pickup: the node is busy, the call is
# waited for again; continue_quiet: the quiet generation goes on there, on its lease; stalled: it is given up as
# `stalled` on a live node (the recovery rules above then say where it goes).
SuspectVerdict = Literal["gone", "wait_for_pickup", "continue_quiet", "stalled"]


@dataclass(frozen=True)
class Suspect:
    """What one call on a suspect node has had so far: pickups waited for while nothing proved the node alive, and
    quiet generations continued on its lease. A call that cannot be continued in place (a replica's load) says so."""

    unproven: int = 0
    quiet: int = 0
    continuable: bool = True

    def verdict(self, timeout: NodeTimeout, liveness: Liveness) -> SuspectVerdict:
        """What the timeout means on a node the evidence says is `liveness`."""
        unproven_too_often = self.unproven + 1 >= UNPROVEN_PICKUPS
        if liveness == "gone" or (liveness == "unknown" and (timeout == "heartbeat" or unproven_too_often)):
            return "gone"
        if timeout == "heartbeat":
            return "continue_quiet" if self.continuable and self.quiet < QUIET_CONTINUES else "stalled"
        return "wait_for_pickup"

    def after(self, verdict: SuspectVerdict, liveness: Liveness) -> Suspect:
        """The call's counts once `verdict` is acted on: an unproven pickup waited for, a quiet generation continued."""
        if verdict == "wait_for_pickup" and liveness == "unknown":
            return replace(self, unproven=self.unproven + 1)
        if verdict == "continue_quiet":
            return replace(self, quiet=self.quiet + 1)
        return self
