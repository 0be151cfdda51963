"""Routing without a fleet: every model is called straight from the control queue.

For a stack run against one OpenAI-compatible engine (`berth worker --no-fleet`, the
workflow tests): no GPU node serves anything, so no step holds a lease.
"""

from __future__ import annotations

from sdk.wire.lease import Direct, LeaseGrant, LeaseRequest, NodeLiveness, ReleaseLease


class DirectRouting:
    def acquire(self, req: LeaseRequest) -> LeaseGrant:
        return Direct(reason="this worker routes every model to its engine without a fleet")

    def release(self, req: ReleaseLease) -> None:
        return None

    def liveness(self, node_id: str) -> NodeLiveness:
        return NodeLiveness(verdict="unknown", detail="this worker knows no fleet")
