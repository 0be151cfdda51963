"""The lease fast path: acquire and release as local activities next to the pool.

A lease is bookkeeping, not work: running it as a local activity in the orchestrator worker
(where the pool's fleet lives) keeps it inside the workflow task that schedules the step's
generation, instead of costing a Temporal round trip of its own before and after it. The
release also answers what the ledger booked for the step, so the workflow charges the books,
not what a node's reply says, at no extra round trip.
"""

from __future__ import annotations

from collections.abc import Callable

from temporalio import activity

from sdk import CheckpointRef
from sdk.wire.contracts import Acquired, AcquireStep, CheckpointInput
from sdk.wire.lease import (
    ACQUIRE_LEASE,
    ACQUIRE_STEP,
    BOOK_CUT,
    NODE_LIVENESS,
    RELEASE_LEASE,
    BookedRound,
    CutGeneration,
    LeaseGrant,
    LeaseRequest,
    NodeLiveness,
    ReleaseLease,
)
from sdk.wire.ledger import LOST, LedgerEntry, booked_round

from .step.ports import LeasePool, TokenLedger
from .step.spans import annotate_acquire


class PoolLeases:
    def __init__(
        self,
        pool: LeasePool,
        ledger: TokenLedger,
        write_predecessor: Callable[[CheckpointInput], CheckpointRef] | None = None,
    ) -> None:
        self.pool = pool
        self.ledger = ledger
        self.write_predecessor = write_predecessor  # the bookkeeping's checkpoint write, beside the store

    @activity.defn(name=ACQUIRE_LEASE)
    def acquire(self, req: LeaseRequest) -> LeaseGrant:
        grant = self.pool.acquire(req)
        annotate_acquire(req, grant)
        return grant

    @activity.defn(name=ACQUIRE_STEP)
    def acquire_step(self, inp: AcquireStep) -> Acquired:
        """Write the step's predecessor, then ask for its lease: a step's two pieces of bookkeeping before its
        generation in one local activity (each costs the workflow an activation and a history marker). The write
        comes first and whatever the pool answers: the predecessor is a finished step, and its write is idempotent."""
        if self.write_predecessor is None:
            raise RuntimeError("this worker's leases were built without the bookkeeping's checkpoint write")
        checkpoint = self.write_predecessor(inp.predecessor)
        return Acquired(grant=self.acquire(inp.request), checkpoint=checkpoint)

    @activity.defn(name=RELEASE_LEASE)
    def release(self, req: ReleaseLease) -> BookedRound | None:
        """End the lease; with `booked_round`, what the ledger booked for that round of the step."""
        self.pool.release(req)
        if req.booked_round is None:
            return None
        r = req.booked_round
        return booked_round(self.ledger.round_entries(r.task_id, r.step, r.first_attempt))

    @activity.defn(name=NODE_LIVENESS)
    def node_liveness(self, node_id: str) -> NodeLiveness:
        """Evidence about a node a step's timeout made suspect: asked before the step is given up on it."""
        return self.pool.liveness(node_id)

    @activity.defn(name=BOOK_CUT)
    def book_cut(self, cut: CutGeneration) -> BookedRound:
        """Book what a cancelled generation had written as lost (the engine served it; nobody will use it), under
        the attempt's own key, so a retry books it once."""
        cost = cut.tokens * (cut.usd_per_1m_completion or 0.0) / 1e6
        self.ledger.record(
            LedgerEntry(
                task_id=cut.task_id,
                step=cut.step,
                attempt=cut.attempt,
                model=cut.model,
                prompt_tokens=0,
                completion_tokens=cut.tokens,
                cost_usd=cost,
                ttft_s=0.0,
                duration_s=0.0,
                served_by=cut.served_by,
                kind=LOST,
            )
        )
        return BookedRound(lost_tokens=cut.tokens, cost_usd=cost)
