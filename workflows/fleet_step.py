"""A step's model call on the GPU fleet: acquire a lease, (wait for the load), generate, release.

    grant = acquire(lease request)          local activity, next to the pool
    load_replica on node/<id>               only while the leased replica is still loading
    generate on node/<id>                   heartbeats; bookkeeping inside, through the API
    release(lease)                          local activity, whatever happened

While the pool cannot place the step it waits in the pool's queue: the task shows
`waiting_for_gpu` with the reason and its place, and asks again with a growing pause (short
at first, since a slot frees within seconds when a replica is merely busy; longer later, so a
task waiting an hour writes hundreds of events, not thousands). A load that fails releases
the lease and is placed again away from that node. Models the fleet does not serve (hosted
providers, a stack run without nodes) are called from the control queue without a lease.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities.llm_step import LlmStepActivities
    from activities.pool_lease import PoolLeases
    from activities.ports import REPLICA_UNAVAILABLE
    from sdk._lease import LeaseGrant, LeaseRequest, ReleaseLease, StepPlacement
    from sdk._node_io import LOAD_REPLICA, ReplicaReady, node_task_queue
    from sdk.contracts import LlmStepInput, LlmStepResult

    from .options import BOOKKEEPING

# A generation heartbeats every second; 10 s of silence means its worker or engine is gone.
GENERATE_HEARTBEAT = timedelta(seconds=10)
GENERATE_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=10),
                             maximum_attempts=6)
GENERATE_TIMEOUT = timedelta(minutes=10)
# A load heartbeats at every readiness probe; a 70B model from origin takes minutes.
LOAD_HEARTBEAT = timedelta(seconds=30)
LOAD_TIMEOUT = timedelta(minutes=30)
LOAD_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=2)
# Placements tried for one step when loads keep failing (each one excludes the node that failed).
MAX_PLACEMENTS = 3
# Attempt numbers of a step's generation on its n-th placement start at n × this, so the ledger's
# (task, step, attempt) keys of two placements never collide (each retries at most 6 times).
ATTEMPT_STRIDE = 100
WAIT_FIRST_S, WAIT_MAX_S = 0.5, 5.0
# A model the fleet does not serve (a hosted provider, a stack without nodes) stays so: ask the
# pool again only every this many steps instead of spending a local activity on every step.
DIRECT_RECHECK_STEPS = 20


class Unplaceable(Exception):
    """No node of the fleet could ever serve this step, or every placement's load failed."""


class FleetStep:
    """Runs one task's model calls on the fleet; remembers the replica that served the last step."""

    def __init__(self, set_waiting: Callable[[str | None], Awaitable[None]], stop_waiting: Callable[[], bool]) -> None:
        self._set_waiting = set_waiting  # None: waiting is over
        self._stop_waiting = stop_waiting
        self.previous_replica: str | None = None
        self._direct_until: dict[str, int] = {}  # model → the step before which it is called without a lease

    async def generate(self, inp: LlmStepInput, request: LeaseRequest) -> LlmStepResult | None:
        """The step's reply; None when the task must stop waiting (cancelled, deadline)."""
        if request.step < self._direct_until.get(request.model, 0):
            return await _generate(inp, task_queue=None)
        asked_at = workflow.now()
        excluded: list[str] = []
        for placement_index in range(MAX_PLACEMENTS):
            grant = await self._acquire(request.model_copy(update={
                "exclude_nodes": request.exclude_nodes + excluded, "previous_replica": self.previous_replica}))
            if grant is None:
                return None
            if grant.outcome == "direct":
                self._direct_until[request.model] = request.step + DIRECT_RECHECK_STEPS
                return await _generate(inp, task_queue=None)
            assert grant.lease_id is not None and grant.node_id is not None and grant.replica_id is not None
            served = gone = False
            try:
                load_s = 0.0
                if grant.load is not None:
                    load_started = workflow.now()
                    try:
                        await workflow.execute_activity(
                            LOAD_REPLICA, grant.load, task_queue=node_task_queue(grant.node_id),
                            result_type=ReplicaReady, start_to_close_timeout=LOAD_TIMEOUT,
                            heartbeat_timeout=LOAD_HEARTBEAT, retry_policy=LOAD_RETRY)
                    except ActivityError as err:
                        workflow.logger.warning("load of %s on %s failed: %s", grant.replica_id, grant.node_id, err)
                        excluded.append(grant.node_id)
                        continue
                    load_s = (workflow.now() - load_started).total_seconds()
                placement = StepPlacement(
                    node_id=grant.node_id, replica_id=grant.replica_id, gpu_indexes=grant.gpu_indexes,
                    gpu_type=grant.gpu_type, tier=grant.tier or "warm", decided_by=grant.decided_by,
                    queue_wait_s=round((workflow.now() - asked_at).total_seconds() - load_s, 3),
                    load_s=round(load_s, 3))
                try:
                    reply = await _generate(
                        inp.model_copy(update={"placement": placement, "attempt_base": placement_index * ATTEMPT_STRIDE}),
                        task_queue=node_task_queue(grant.node_id))
                except ActivityError as err:
                    if _error_type(err) != REPLICA_UNAVAILABLE:
                        raise
                    # The node no longer has the replica (it restarted, or unloaded it): place again.
                    workflow.logger.info("replica %s on %s is gone: %s", grant.replica_id, grant.node_id, err)
                    gone = True
                    continue
                served = True
                self.previous_replica = grant.replica_id
                return reply
            finally:
                await workflow.execute_local_activity_method(
                    PoolLeases.release,
                    ReleaseLease(lease_id=grant.lease_id, replica_warm=served, replica_gone=gone), **BOOKKEEPING)
        raise Unplaceable(f"{MAX_PLACEMENTS} placements of {request.model} failed"
                          + (f" (loads failed on {', '.join(excluded)})" if excluded else " (their replicas were gone)"))

    async def _acquire(self, request: LeaseRequest) -> LeaseGrant | None:
        pause, waiting_said = WAIT_FIRST_S, None
        while True:
            grant = await workflow.execute_local_activity_method(PoolLeases.acquire, request, **BOOKKEEPING)
            if grant.outcome in ("placed", "direct"):
                if waiting_said is not None:
                    await self._set_waiting(None)
                return grant
            if grant.outcome == "never":
                raise Unplaceable(grant.reason or f"no node of this fleet can serve {request.model}")
            said = f"gpu: {grant.reason} (place {grant.queue_position} in the queue for {request.model})"
            if said != waiting_said:
                await self._set_waiting(said)
                waiting_said = said
            try:
                await workflow.wait_condition(self._stop_waiting, timeout=timedelta(seconds=pause))
            except TimeoutError:
                pass
            if self._stop_waiting():
                return None
            pause = min(pause * 2, WAIT_MAX_S)


def _error_type(err: ActivityError) -> str | None:
    cause = err.cause
    return cause.type if isinstance(cause, ApplicationError) else None


async def _generate(inp: LlmStepInput, task_queue: str | None) -> LlmStepResult:
    return await workflow.execute_activity_method(
        LlmStepActivities.generate, inp, task_queue=task_queue, start_to_close_timeout=GENERATE_TIMEOUT,
        heartbeat_timeout=GENERATE_HEARTBEAT, retry_policy=GENERATE_RETRY)
