"""The lease fast path: acquire and release as local activities next to the pool.

A lease is bookkeeping, not work: running it as a local activity in the orchestrator worker
(where the pool's fleet lives) keeps it inside the workflow task that schedules the step's
generation, instead of costing a Temporal round trip of its own before and after it.
"""

from __future__ import annotations

from temporalio import activity

from sdk._lease import ACQUIRE_LEASE, RELEASE_LEASE, LeaseGrant, LeaseRequest, ReleaseLease

from .ports import LeasePool
from .spans import annotate_acquire


class PoolLeases:
    def __init__(self, pool: LeasePool) -> None:
        self.pool = pool

    @activity.defn(name=ACQUIRE_LEASE)
    def acquire(self, req: LeaseRequest) -> LeaseGrant:
        grant = self.pool.acquire(req)
        annotate_acquire(req, grant)
        return grant

    @activity.defn(name=RELEASE_LEASE)
    def release(self, req: ReleaseLease) -> None:
        self.pool.release(req)
