"""The commands a step on the fleet issues, each with its timeouts and retry policy where it is made.

Local activities run next to the pool and the store (the lease, the step's predecessor, the node's liveness, a cut's
books); the load and the generation run on `node/<id>`, the queue only that node's agent polls, and are started
rather than awaited, so that a revocation, a preemption or the task's cancellation can cut them (fleet_step.py).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError
from temporalio.workflow import ActivityCancellationType, ActivityHandle

with workflow.unsafe.imports_passed_through():
    from sdk import CheckpointRef
    from sdk.wire.contracts import (
        CHECKPOINT_ACTIVITY,
        GENERATE_ACTIVITY,
        Acquired,
        AcquireStep,
        CheckpointInput,
        GenerationProgress,
        LlmStepInput,
        LlmStepResult,
    )
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
        Placed,
        ReleaseLease,
    )
    from sdk.wire.node_io import LOAD_REPLICA, ReplicaReady, node_task_queue

    from .event_clock import EventClock
    from .fleet_outcomes import Cancelled, Failed, Generation, Interrupted, StepCut, classified
    from .interruptions import progress_of, revoked
    from .options import BOOKKEEPING_RETRY, BOOKKEEPING_TIMEOUT

# A generation heartbeats every 0.5 s while tokens stream (every 2 s before them), and its worker sends a beat at
# least every second; by default 5 s of silence (`heartbeat_timeout_s`) makes the step ask whether its node is gone.
GENERATE_HEARTBEAT = timedelta(seconds=5)
GENERATE_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=10), maximum_attempts=6
)
NO_RETRY = RetryPolicy(maximum_attempts=1)
GENERATE_TIMEOUT = timedelta(minutes=10)
LOAD_HEARTBEAT = timedelta(seconds=30)  # a load heartbeats at every readiness probe; a 70B model takes minutes
LOAD_TIMEOUT = timedelta(minutes=30)
LOAD_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=2)


async def acquire_lease(request: LeaseRequest) -> LeaseGrant:
    return await workflow.execute_local_activity(  # type: ignore[call-overload]  # a union result: temporalio says `type`, its converter takes the hint
        ACQUIRE_LEASE,
        request,
        result_type=LeaseGrant,
        start_to_close_timeout=BOOKKEEPING_TIMEOUT,
        retry_policy=BOOKKEEPING_RETRY,
    )


async def acquire_step(request: LeaseRequest, inp: LlmStepInput) -> Acquired:
    """A lease ask that writes the step's predecessor in the same local activity."""
    return await workflow.execute_local_activity(
        ACQUIRE_STEP,
        AcquireStep(
            request=request,
            predecessor=CheckpointInput(task_id=inp.task_id, parent=inp.checkpoint, pending=inp.pending),
        ),
        result_type=Acquired,
        start_to_close_timeout=BOOKKEEPING_TIMEOUT,
        retry_policy=BOOKKEEPING_RETRY,
    )


async def write_predecessor(inp: LlmStepInput) -> CheckpointRef:
    """The step's predecessor, written here, beside the store: a node reads the task's conversation, never writes it."""
    return await workflow.execute_local_activity(
        CHECKPOINT_ACTIVITY,
        CheckpointInput(task_id=inp.task_id, parent=inp.checkpoint, pending=inp.pending),
        result_type=CheckpointRef,
        start_to_close_timeout=BOOKKEEPING_TIMEOUT,
        retry_policy=BOOKKEEPING_RETRY,
    )


async def release_lease(release: ReleaseLease) -> BookedRound | None:
    return await workflow.execute_local_activity(
        RELEASE_LEASE,
        release,
        result_type=BookedRound | None,  # type: ignore[arg-type]  # a union result: temporalio says `type`, its converter takes the hint
        start_to_close_timeout=BOOKKEEPING_TIMEOUT,
        retry_policy=BOOKKEEPING_RETRY,
    )


async def node_liveness(node_id: str) -> NodeLiveness:
    """The pool's evidence about the node (orchestrator/pool/liveness.py)."""
    return await workflow.execute_local_activity(
        NODE_LIVENESS,
        node_id,
        result_type=NodeLiveness,
        start_to_close_timeout=BOOKKEEPING_TIMEOUT,
        retry_policy=BOOKKEEPING_RETRY,
    )


async def book_cut(
    inp: LlmStepInput, progress: GenerationProgress | None, usd_per_1m: float | None, served_by: str
) -> StepCut:
    """Book what a cancelled generation had written as lost: the engine served it, so the books say so."""
    lost = BookedRound()
    if progress is not None and progress.generated > 0:
        lost = await workflow.execute_local_activity(
            BOOK_CUT,
            CutGeneration(
                task_id=inp.task_id,
                step=inp.step,
                attempt=progress.attempt,
                model=inp.model,
                tokens=min(progress.generated, inp.max_tokens),
                usd_per_1m_completion=usd_per_1m,
                served_by=served_by,
            ),
            result_type=BookedRound,
            start_to_close_timeout=BOOKKEEPING_TIMEOUT,
            retry_policy=BOOKKEEPING_RETRY,
        )
    return StepCut(lost.lost_tokens, lost.cost_usd, inp.checkpoint if inp.pending is None else None)


def start_load(grant: Placed, pickup: timedelta) -> ActivityHandle[ReplicaReady]:
    """The leased replica's load on its node (idempotent per replica: a load asked again joins the one under way)."""
    return workflow.start_activity(
        LOAD_REPLICA,
        grant.load,
        task_queue=node_task_queue(grant.node_id),
        result_type=ReplicaReady,
        start_to_close_timeout=LOAD_TIMEOUT,
        schedule_to_start_timeout=pickup,
        heartbeat_timeout=LOAD_HEARTBEAT,
        retry_policy=LOAD_RETRY,
    )


async def load_on_node(
    grant: Placed, pickup: timedelta, clock: EventClock, gone: Callable[[], bool], cancelled: Callable[[], bool]
) -> Interrupted | Failed | Cancelled | None:
    """One load of the leased replica (None: it is ready), cut when the node is revoked; a cancelled task stops
    waiting for it (the load goes on for the other steps that lease the replica)."""
    handle = start_load(grant, pickup)
    await clock.wait(lambda: handle.done() or gone() or cancelled())
    if not handle.done() and not gone():
        return Cancelled(None)
    if not handle.done():
        handle.cancel()
        return Interrupted(revoked(grant.node_id))
    try:
        await handle
    except ActivityError as err:
        return classified(err, "load")
    return None


def start_generation(
    inp: LlmStepInput, node_id: str, heartbeat: timedelta, pickup: timedelta
) -> ActivityHandle[LlmStepResult]:
    """One generate activity on the node's queue, never retried there (a retry would go back to the same node:
    failover is the fleet step's)."""
    return workflow.start_activity(  # type: ignore[call-overload]  # a union result: temporalio says `type`, its converter takes the hint
        GENERATE_ACTIVITY,
        inp,
        task_queue=node_task_queue(node_id),
        result_type=LlmStepResult,
        start_to_close_timeout=GENERATE_TIMEOUT,
        heartbeat_timeout=heartbeat,
        schedule_to_start_timeout=pickup,
        retry_policy=NO_RETRY,
        # Wait for the cut-off generation to report what it had generated, so its tokens are booked.
        cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
    )


def start_direct(inp: LlmStepInput) -> ActivityHandle[LlmStepResult]:
    """The generate activity off the fleet, retried by Temporal. A cancellation cuts it."""
    return workflow.start_activity(  # type: ignore[call-overload]  # a union result: temporalio says `type`, its converter takes the hint
        GENERATE_ACTIVITY,
        inp,
        result_type=LlmStepResult,
        start_to_close_timeout=GENERATE_TIMEOUT,
        heartbeat_timeout=GENERATE_HEARTBEAT,
        retry_policy=GENERATE_RETRY,
        cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
    )


async def abandon(handle: ActivityHandle[LlmStepResult], node_id: str, heartbeat_timeout: timedelta) -> Generation:
    """Cut a generation on a revoked node, waiting a heartbeat timeout at most for it to stop (a reply it
    had finished, and booked before the revocation, still counts)."""
    handle.cancel()
    try:
        await workflow.wait_condition(handle.done, timeout=heartbeat_timeout)
    except TimeoutError:
        pass
    if handle.done() and handle.exception() is None:
        return handle.result()
    return Interrupted(revoked(node_id))


async def off_the_fleet(inp: LlmStepInput, clock: EventClock, cancelled: Callable[[], bool]) -> LlmStepResult | StepCut:
    """The generate activity off the fleet, retried by Temporal (on a node it is never retried: a retry
    would go back to the same node; failover and retries there are the fleet step's). A cancellation cuts it."""
    handle = start_direct(inp)
    await clock.wait(lambda: handle.done() or cancelled())
    cancelling = not handle.done()
    if cancelling:
        handle.cancel()
    try:
        return await handle
    except ActivityError as err:
        if not cancelling:
            raise
        return await book_cut(inp, progress_of(err), None, "")
