"""A step's model call on the GPU fleet, as a pipeline of named phases.

    reserve     the lease request carries the step's limits (StepLimits): what the node may book
    acquire     local activity next to the pool: Placed | Wait | Never | Direct
    checkpoint  local activity: the step's predecessor, written beside the store before a node sees the task
    load        on node/<id>, only while the leased replica is still loading
    generate    on node/<id>: Reply | Shortfall | Interrupted | Failed (bookkeeping inside, through the API)
    settle      local activity: release the lease, and read back what the ledger booked for the step's round

A node may lie, so nothing it says moves the task's books: it never writes the task's checkpoints
(the predecessor is written here first), the control plane bounds what it books by the lease's
limits (which this workflow sets), and the step is charged what the ledger booked, read back at
release, not what the node's reply claims. A reply the node never booked is a failed call.

A timeout is a suspicion, not a verdict. A call not picked up in time, or a generation whose heartbeats
went quiet, may be a node that is gone or one that is merely busy; the pool is asked for evidence about
the node itself (liveness.py) before the step is given up on it. A busy node keeps the step: a call it
has not picked up is waited for, and says so; a generation that went quiet on a live node resumes
there. Where an interrupted step goes next is the task's recovery rules' choice (sdk/wire/recovery.py).

While the pool cannot place the step it waits in the pool's queue: the task shows
`waiting_for_gpu` with the reason and its place, and asks again with a growing pause. The task's
`gpu_trouble` tells why a step is not running: `capacity`, `preemption` or `crash_loop`. A
cancelled task cuts its running generation at once; what it had written is booked as lost.
Models the fleet does not serve (hosted providers, a stack run without nodes) are called from
the control queue without a lease.
"""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Literal, TypeVar

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError
from temporalio.workflow import ActivityCancellationType, ActivityHandle

with workflow.unsafe.imports_passed_through():
    from sdk import CheckpointRef, GpuTrouble
    from sdk.wire.contracts import (
        CHECKPOINT_ACTIVITY,
        GENERATE_ACTIVITY,
        Acquired,
        AcquireStep,
        CheckpointInput,
        GenerationProgress,
        LlmStepInput,
        LlmStepResult,
        Reply,
        Shortfall,
    )
    from sdk.wire.lease import (
        ACQUIRE_LEASE,
        ACQUIRE_STEP,
        BOOK_CUT,
        NODE_LIVENESS,
        RELEASE_LEASE,
        BookedRound,
        CutGeneration,
        Direct,
        LeaseGrant,
        LeaseRequest,
        Never,
        NextStep,
        NodeLiveness,
        Placed,
        ReleaseLease,
        StepLimits,
        StepPlacement,
        StepRound,
        call_extras_digest,
    )
    from sdk.wire.node_io import LOAD_REPLICA, ReplicaReady, node_task_queue
    from sdk.wire.prefix import carried_prefix, continuable
    from sdk.wire.recovery import DEFAULT_RECOVERY, Cut, RecoveryRule, avoid_after
    from sdk.wire.tool_names import ASK_HUMAN_TOOL, SPAWN_AGENT_TOOL

    from .code_versions import EVENT_CLOCK, LEGACY, legacy_patched
    from .event_clock import EventClock
    from .interruptions import Interruption, books_refused, interruption, is_permanent, progress_of, revoked
    from .options import BOOKKEEPING_RETRY, BOOKKEEPING_TIMEOUT

# A generation heartbeats every 0.5 s while tokens stream (every 2 s before them), and its worker sends a beat at
# least every second; by default 5 s of silence (`heartbeat_timeout_s`) makes the step ask whether its node is gone.
GENERATE_HEARTBEAT = timedelta(seconds=5)
GENERATE_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=10), maximum_attempts=6
)
NO_RETRY = RetryPolicy(maximum_attempts=1)
# A node's worker polls its queue all the time: a call not picked up in this share of the heartbeat timeout
# makes the step ask for evidence about the node (kept under it, so a dead node is found as fast as mid-stream).
NODE_PICKUP_SHARE = 0.8
# Pickups a node whose liveness nothing proves (`unknown`) gets before it is taken for gone.
UNPROVEN_PICKUPS = 2
# The patches that added two behaviours, in version-0 runs' histories (code_versions.py): a step's predecessor is
# written by its first lease ask (one local activity, not two), and a load says so in the task's state and events.
PREDECESSOR_WITH_ACQUIRE = "predecessor-with-acquire"
REPORTS_LOADS = "reports-loads"
_WEIGHTS_FROM = {
    "disk": "weights from its disk",
    "datacenter": "weights from a peer in its datacenter",
    "origin": "weights from origin",
    "loading": "its load had already begun",
}
# Times a quiet generation on a live node is continued there (each one attempt of the placement's stride) before
# the step counts it `stalled` and places it elsewhere: an engine that is wedged, not merely slow.
QUIET_CONTINUES = 3
MAX_STEP_FAILURES = 6  # failures (not interruptions) of one step's generation before the task fails
GENERATE_TIMEOUT = timedelta(minutes=10)
LOAD_HEARTBEAT = timedelta(seconds=30)  # a load heartbeats at every readiness probe; a 70B model takes minutes
LOAD_TIMEOUT = timedelta(minutes=30)
LOAD_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=2)
# Loads of one step that may fail (each excluding its node) before the task fails: a replica that
# crashes wherever it starts is a broken model or engine, not a capacity shortage.
MAX_LOAD_FAILURES = 3
# Attempt numbers of a step's generation on its n-th placement start at n × this, so the ledger's
# (task, step, attempt) keys of two placements never collide (each retries at most 6 times).
ATTEMPT_STRIDE = 100
WAIT_FIRST_S, WAIT_MAX_S = 0.5, 5.0
# A waiting step's place in the queue changes at almost every ask; the task's state (a store write and
# an event) is rewritten for it at most this often, and at once when the reason for waiting changes.
PLACE_UPDATE_EVERY = timedelta(seconds=15)
# A node the recovery rules keep away is kept out of the step's placements this long: longer than the pool takes
# to mark a silent node lost (20 s by default), after which it filters the node itself; not for good, since a node
# that failed a step must not strand it when every other node has failed it too.
EXCLUDE_NODE_FOR = timedelta(seconds=30)
# A model the fleet does not serve (a hosted provider, a stack without nodes) stays so: ask the
# pool again only every this many steps instead of spending a local activity on every step.
DIRECT_RECHECK_STEPS = 20


class Unplaceable(Exception):
    """No node could ever serve this step, its loads keep failing, or it was interrupted too often."""


@dataclass(frozen=True)
class Interrupted:
    """The generation (or load) ended without a reply because its node went away, or is cut off."""

    interruption: Interruption


@dataclass(frozen=True)
class Failed:
    """The load or the call itself went wrong on a node that is there."""

    error: ActivityError | None
    phase: Literal["load", "generate", "books"]  # books: it answered without booking the call
    detail: str


@dataclass(frozen=True)
class StepCut:
    """The task's cancellation cut the step's generation: what it had written, as booked (lost)."""

    lost_tokens: int
    cost_usd: float
    checkpoint: CheckpointRef | None  # the step's predecessor, when it was written before the cut


@dataclass(frozen=True)
class _Cancelled:
    progress: GenerationProgress | None


Generation = Reply | Shortfall | Interrupted | Failed | _Cancelled
# A generation's or a load's outcome, weighed against the evidence about its node: either comes back as it was,
# as a cut (the node is gone or stalled), or as the evidence to wait on.
WeighedOutcome = TypeVar("WeighedOutcome", bound=Generation)


@dataclass(frozen=True)
class _Pending:
    """An interruption waiting to be recorded with where the step resumed."""

    interruption: Interruption
    grant: Placed
    at: datetime
    tokens_kept: int
    tokens_lost: int


@dataclass
class _Round:
    """One ask of a step on the fleet (a step asked again after waiting for budget is a new round)."""

    inp: LlmStepInput
    request: LeaseRequest
    asked_at: datetime
    first_attempt: int
    excluded: dict[str, datetime] = field(default_factory=dict)  # node → when the recovery rules sent it away
    avoided_zones: set[str] = field(default_factory=set)
    failures: int = 0
    load_failures: int = 0
    pending: _Pending | None = None
    trouble: GpuTrouble = "capacity"


class FleetStep:
    """Runs one task's model calls on the fleet; remembers the replica that served the last step."""

    def __init__(
        self,
        set_waiting: Callable[[str | None, GpuTrouble | None], Awaitable[None]],
        stop_waiting: Callable[[], bool],
        cancelled: Callable[[], bool],
        record_event: Callable[[str, dict], Awaitable[None]],
        clock: EventClock,
        max_interruptions: int,
        heartbeat_timeout: timedelta = GENERATE_HEARTBEAT,
        interruptions: int = 0,
        placements_step: int = 0,
        placements_used: int = 0,
        recovery: Sequence[RecoveryRule] = DEFAULT_RECOVERY,
        workflow_version: int = LEGACY,
    ) -> None:
        self._set_waiting = set_waiting  # (None, None): waiting is over
        self._said: tuple[str, GpuTrouble] | None = None
        self._stop_waiting = stop_waiting
        self._cancelled = cancelled
        self._record_event = record_event  # (kind, details): an event in the task's log, beside its state
        self.clock = clock  # the task's: what decisions read as now (code_versions.py, rule 3)
        self.workflow_version = workflow_version
        self.max_interruptions = max_interruptions
        self.heartbeat_timeout = heartbeat_timeout
        self.node_pickup = heartbeat_timeout * NODE_PICKUP_SHARE
        self.recovery = tuple(recovery)
        self.interruptions = interruptions  # across the task's runs (continue-as-new carries it)
        self._inherited: GenerationProgress | None = None  # the last heartbeat of this step's cut generation
        self.preempt_requested = False  # a simulated preemption: cut the running generation off
        self.previous_replica: str | None = None
        # The next step's prompt re-sends the conversation: at least what the last step's prompt and answer held.
        self.context_tokens = 0
        self._direct_until: dict[str, int] = {}  # model → the step before which it is called without a lease
        self.gone_nodes: set[str] = set()  # revoked or removed while this task ran: never placed on again
        # The step whose placements were counted last, and how many it used (across its rounds).
        self.placements_step = placements_step
        self.placements_used = placements_used

    async def generate(self, inp: LlmStepInput, request: LeaseRequest) -> LlmStepResult | StepCut | None:
        """The step's reply (or shortfall); a StepCut when the task's cancellation cut it; None when the task
        must stop waiting for a GPU (cancelled, deadline).

        Raises Unplaceable when no node could ever serve it, when loads keep failing, or when the task has
        been interrupted more than `max_interruptions` times; an ActivityError for a failure that retries
        did not fix.
        """
        if request.step < self._direct_until.get(request.model, 0):
            return await self._direct(inp)
        # A step asked again (it waited for budget) is a new round: its attempts go on from the last round's.
        first_placement = self.placements_used if request.step == self.placements_step else 0
        self.placements_step = request.step
        rnd = _Round(inp, request, self.clock.now(), first_attempt=first_placement * ATTEMPT_STRIDE + 1)
        for index in itertools.count(first_placement):
            self.placements_used = index + 1
            grant = await self._acquire(rnd, index)
            if grant is None:
                return None
            if isinstance(grant, Direct):
                self._direct_until[request.model] = request.step + DIRECT_RECHECK_STEPS
                return await self._direct(rnd.inp)
            rnd.inp = await self._checkpoint(rnd.inp)
            outcome = await self._on_lease(rnd, grant, index)
            if isinstance(outcome, (Reply, Shortfall, StepCut)):
                return outcome
            await self._recover(rnd, grant, outcome)
        raise AssertionError("unreachable")

    def node_gone(self, node_id: str) -> None:
        """The control plane no longer trusts the node: a load or generation there is cut, and no placement of
        this task's goes there again."""
        self.gone_nodes.add(node_id)

    # ----- reserve and acquire ---------------------------------------------------------------
    def _asking(self, rnd: _Round, index: int) -> LeaseRequest:
        """The lease request, made again at each ask: exclusions end while the step waits."""
        inp = rnd.inp
        return rnd.request.model_copy(
            update={
                "exclude_nodes": rnd.request.exclude_nodes
                + sorted(self.gone_nodes)
                + still_excluded(rnd.excluded, self.clock.now()),
                "avoid_spot_zones": sorted(rnd.avoided_zones),
                "previous_replica": self.previous_replica,
                "prompt_tokens": self.context_tokens,
                "limits": StepLimits(
                    max_tokens=inp.max_tokens,
                    token_allowance=max(0, inp.token_allowance),
                    usd_allowance=None if inp.usd_allowance is None else max(0.0, inp.usd_allowance),
                    first_attempt=index * ATTEMPT_STRIDE + 1,
                    last_attempt=(index + 1) * ATTEMPT_STRIDE,
                    round_first_attempt=rnd.first_attempt,
                    call_extras=call_extras_digest(inp.instructions, inp.tools),
                ),
            }
        )

    async def _acquire(self, rnd: _Round, index: int) -> Placed | Direct | None:
        """A lease; while the pool says wait, the task shows why (under the trouble that brought the step here)."""
        pause = WAIT_FIRST_S
        said: tuple[str, datetime] | None = None  # (wait reason, when) last shown
        while True:
            request = self._asking(rnd, index)
            grant = await self._ask(rnd, request)
            if isinstance(grant, (Placed, Direct)):
                await self._say(None, None)  # placed: the step runs (or waits for its replica's load) again
                return grant
            if isinstance(grant, Never):
                raise Unplaceable(grant.reason)
            now = self.clock.now()
            if said is None or said[0] != grant.wait_reason or now - said[1] >= PLACE_UPDATE_EVERY:
                await self._say(
                    f"gpu: {grant.reason} (place {grant.queue_position} in the queue for {request.model})", rnd.trouble
                )
                said = (grant.wait_reason, now)
            await self.clock.wait(self._stop_waiting, timeout=timedelta(seconds=pause))
            if self._stop_waiting():
                return None
            pause = min(pause * 2, WAIT_MAX_S)

    async def _ask(self, rnd: _Round, request: LeaseRequest) -> LeaseGrant:
        """Ask the pool for a lease. The step's first ask carries its predecessor, written in the same local activity
        (workflows that began before it did wrote it apart, after placement: `_checkpoint`)."""
        inp = rnd.inp
        if inp.pending is None or not self._legacy_or_current(PREDECESSOR_WITH_ACQUIRE):
            return await workflow.execute_local_activity(  # type: ignore[call-overload]  # a union result: temporalio says `type`, its converter takes the hint
                ACQUIRE_LEASE,
                request,
                result_type=LeaseGrant,
                start_to_close_timeout=BOOKKEEPING_TIMEOUT,
                retry_policy=BOOKKEEPING_RETRY,
            )
        asked = await workflow.execute_local_activity(
            ACQUIRE_STEP,
            AcquireStep(
                request=request,
                predecessor=CheckpointInput(task_id=inp.task_id, parent=inp.checkpoint, pending=inp.pending),
            ),
            result_type=Acquired,
            start_to_close_timeout=BOOKKEEPING_TIMEOUT,
            retry_policy=BOOKKEEPING_RETRY,
        )
        rnd.inp = inp.model_copy(update={"checkpoint": asked.checkpoint, "pending": None})
        return asked.grant

    # ----- checkpoint ------------------------------------------------------------------------
    async def _checkpoint(self, inp: LlmStepInput) -> LlmStepInput:
        """Write the step's predecessor here, beside the store: a node reads the task's conversation, never
        writes it."""
        if inp.pending is None:
            return inp
        ref = await workflow.execute_local_activity(
            CHECKPOINT_ACTIVITY,
            CheckpointInput(task_id=inp.task_id, parent=inp.checkpoint, pending=inp.pending),
            result_type=CheckpointRef,
            start_to_close_timeout=BOOKKEEPING_TIMEOUT,
            retry_policy=BOOKKEEPING_RETRY,
        )
        return inp.model_copy(update={"checkpoint": ref, "pending": None})

    # ----- on the lease: load, generate, settle ----------------------------------------------
    async def _on_lease(
        self, rnd: _Round, grant: Placed, index: int
    ) -> Reply | Shortfall | StepCut | Interrupted | Failed:
        """Load (if need be) and generate under the lease; release it whatever happened, and settle."""
        outcome: Generation | None = None
        placement: StepPlacement | None = None
        try:
            loaded = await self._load(rnd, grant)
            if isinstance(loaded, float):
                if rnd.pending is not None:  # recorded once the step runs again: its resume time includes the load
                    await self._record(rnd.pending, rnd.request.step, grant)
                    rnd.pending = None
                placement = self._placement(rnd, grant, loaded)
                outcome = await self._generate(rnd, grant, placement, index)
            else:
                outcome = loaded
        finally:
            served = isinstance(outcome, (Reply, Shortfall))
            gone = (
                placement is None
                and isinstance(outcome, (Interrupted, Failed))  # its load failed
                or isinstance(outcome, Interrupted)
                and outcome.interruption.replica_gone
            )
            booked = await workflow.execute_local_activity(
                RELEASE_LEASE,
                ReleaseLease(
                    lease_id=grant.lease_id,
                    replica_warm=served,
                    replica_gone=gone,
                    booked_round=StepRound(task_id=rnd.inp.task_id, step=rnd.inp.step, first_attempt=rnd.first_attempt)
                    if served
                    else None,
                    next_step=next_step_of(outcome) if isinstance(outcome, Reply) else None,
                ),
                result_type=BookedRound | None,  # type: ignore[arg-type]  # a union result: temporalio says `type`, its converter takes the hint
                start_to_close_timeout=BOOKKEEPING_TIMEOUT,
                retry_policy=BOOKKEEPING_RETRY,
            )
        return await self._settle(rnd, grant, placement, outcome, booked)

    async def _load(self, rnd: _Round, grant: Placed) -> float | Interrupted | Failed | _Cancelled:
        """Seconds spent waiting for the leased replica's load on its node (0 when it is warm). While it loads the
        task says so (`waiting_for_gpu`, a `replica_loading` event, then `replica_loaded` with its seconds): a
        large model's cold start takes minutes, which showed as plain `running`. (Runs that began before this
        report nothing, as their histories have it.)"""
        if grant.load is None:
            return 0.0
        reports = self._legacy_or_current(REPORTS_LOADS)
        if reports:
            await self._record_event(
                "replica_loading",
                {
                    "node_id": grant.node_id,
                    "replica_id": grant.replica_id,
                    "model": grant.load.model.name,
                    "tier": grant.tier,
                },
            )
            await self._set_waiting(
                f"a cold start: {grant.load.model.name} loading on {grant.node_id}"
                f" ({_WEIGHTS_FROM.get(grant.tier, grant.tier)})",
                None,
            )
        try:
            loaded = await self._load_until_ready(rnd, grant)
        finally:
            if reports:
                await self._set_waiting(None, None)
        if reports and isinstance(loaded, float):
            await self._record_event(
                "replica_loaded",
                {"node_id": grant.node_id, "replica_id": grant.replica_id, "seconds": round(loaded, 2)},
            )
        return loaded

    async def _load_until_ready(self, rnd: _Round, grant: Placed) -> float | Interrupted | Failed | _Cancelled:
        """`_load`'s wait. A busy node that has not picked the load up yet is waited for, as a generation is (loads
        are idempotent per replica). A cancelled task stops waiting; the load goes on for the other steps that
        lease the replica."""
        assert grant.load is not None
        started, unproven = self.clock.now(), 0
        while True:
            failed = await self._load_once(grant)
            if failed is None:
                return (self.clock.now() - started).total_seconds()
            if isinstance(failed, _Cancelled):
                return failed
            weighed = await self._weigh(failed, grant.node_id, unproven, "its load")
            if isinstance(weighed, NodeLiveness):
                unproven += weighed.verdict == "unknown"
                continue
            if rnd.pending is not None:  # placed here after an interruption; its load failed too
                await self._record(rnd.pending, rnd.request.step, grant)
                rnd.pending = None
            return weighed

    async def _load_once(self, grant: Placed) -> Interrupted | Failed | _Cancelled | None:
        handle = workflow.start_activity(
            LOAD_REPLICA,
            grant.load,
            task_queue=node_task_queue(grant.node_id),
            result_type=ReplicaReady,
            start_to_close_timeout=LOAD_TIMEOUT,
            schedule_to_start_timeout=self.node_pickup,
            heartbeat_timeout=LOAD_HEARTBEAT,
            retry_policy=LOAD_RETRY,
        )
        await self.clock.wait(lambda: handle.done() or grant.node_id in self.gone_nodes or self._cancelled())
        if not handle.done() and grant.node_id not in self.gone_nodes:
            return _Cancelled(None)
        if not handle.done():
            handle.cancel()
            return Interrupted(revoked(grant.node_id))
        try:
            await handle
        except ActivityError as err:
            return _classified(err, "load")
        return None

    async def _weigh(
        self, outcome: WeighedOutcome, node_id: str, unproven: int, what: str
    ) -> WeighedOutcome | Interrupted | NodeLiveness:
        """A timeout weighed against the evidence about its node: the outcome to act on, or the evidence when the
        step should wait for the node again (it is busy, not gone). Only a `lost` interruption is weighed."""
        if not isinstance(outcome, Interrupted) or outcome.interruption.kind != "lost":
            return outcome
        lost = outcome.interruption
        evidence = await workflow.execute_local_activity(
            NODE_LIVENESS,
            node_id,
            result_type=NodeLiveness,
            start_to_close_timeout=BOOKKEEPING_TIMEOUT,
            retry_policy=BOOKKEEPING_RETRY,
        )
        if evidence.verdict == "gone" or (
            evidence.verdict == "unknown" and (not lost.never_started or unproven + 1 >= UNPROVEN_PICKUPS)
        ):
            return Interrupted(lost.gone(evidence.detail))
        if not lost.never_started:
            return Interrupted(lost.stalled(evidence.detail))
        await self._say(
            f"gpu: waiting for {node_id} to pick {what} up: the node is busy, not gone ({evidence.detail})", "capacity"
        )
        return evidence

    def _placement(self, rnd: _Round, grant: Placed, load_s: float) -> StepPlacement:
        return StepPlacement(
            lease_id=grant.lease_id,
            node_id=grant.node_id,
            replica_id=grant.replica_id,
            gpu_indexes=grant.gpu_indexes,
            gpu_type=grant.gpu_type,
            tier=grant.tier,
            decided_by=grant.decided_by,
            queue_wait_s=max(0.0, round((self.clock.now() - rnd.asked_at).total_seconds() - load_s, 3)),
            load_s=round(load_s, 3),
        )

    async def _generate(self, rnd: _Round, grant: Placed, placement: StepPlacement, index: int) -> Generation:
        """Generate on the node; a timeout there is weighed against the evidence about the node before the step
        is given up on it: a busy node's call is waited for, and a quiet generation on a live node is continued
        there, on the same lease, up to QUIET_CONTINUES times before it counts as `stalled`."""
        inp = rnd.inp.model_copy(
            update={
                "placement": placement,
                "attempt_base": index * ATTEMPT_STRIDE,
                "inherited_progress": self._inherited,
            }
        )
        unproven = quiet = 0
        while True:
            weighed = await self._weigh(
                await self._generate_on_node(inp, grant.node_id), grant.node_id, unproven, f"step {inp.step}'s call"
            )
            if isinstance(weighed, NodeLiveness):
                unproven += weighed.verdict == "unknown"
                continue
            if isinstance(weighed, Interrupted) and weighed.interruption.kind == "stalled" and quiet < QUIET_CONTINUES:
                quiet += 1
                inp = await self._continue_quiet(inp, grant, weighed.interruption, quiet)
                continue
            if quiet and isinstance(weighed, (Reply, Shortfall)):
                await self._say(None, None)  # it answered: the step no longer waits on the node
            return _carrying(weighed, inp.inherited_progress) if quiet else weighed

    async def _continue_quiet(self, inp: LlmStepInput, grant: Placed, lost: Interruption, quiet: int) -> LlmStepInput:
        """A generation whose heartbeats went quiet on a node that is alive (a busy machine) goes on there: the
        next attempt of the same lease continues the text its last heartbeat carried, as a new placement would,
        without giving up the replica, its warm prefix or the step's place. It is said and recorded, not hidden."""
        progress = lost.progress if lost.progress is not None else inp.inherited_progress
        carried = progress.generated if progress is not None else 0
        await self._say(
            f"gpu: step {inp.step}'s generation on {grant.node_id} went quiet but the node is alive:"
            f" continuing it there ({quiet} of {QUIET_CONTINUES}; {lost.detail})",
            "capacity",
        )
        await self._record_event(
            "generation_quiet",
            {
                "step": inp.step,
                "node_id": grant.node_id,
                "replica_id": grant.replica_id,
                "detail": lost.detail,
                "continued": quiet,
                "tokens_carried": carried,
                "at": self.clock.now().isoformat(),
            },
        )
        self._inherited = progress
        return inp.model_copy(update={"attempt_base": inp.attempt_base + 1, "inherited_progress": progress})

    async def _generate_on_node(self, inp: LlmStepInput, node_id: str) -> Generation:
        """One generate activity on the node's queue. A simulated preemption, the node's revocation or the task's
        cancellation cuts it off (a revoked node is not waited for: it may never answer the cancellation)."""
        assert inp.placement is not None
        handle = workflow.start_activity(  # type: ignore[call-overload]  # a union result: temporalio says `type`, its converter takes the hint
            GENERATE_ACTIVITY,
            inp,
            task_queue=node_task_queue(node_id),
            result_type=LlmStepResult,
            start_to_close_timeout=GENERATE_TIMEOUT,
            heartbeat_timeout=self.heartbeat_timeout,
            schedule_to_start_timeout=self.node_pickup,
            retry_policy=NO_RETRY,
            # Wait for the cut-off generation to report what it had generated, so its tokens are booked.
            cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
        )
        # The reply, or the signal that cuts it: a moment history fixes (the clock moves).
        await self.clock.wait(
            lambda: handle.done() or self.preempt_requested or node_id in self.gone_nodes or self._cancelled()
        )
        if not handle.done() and node_id in self.gone_nodes:
            return await self._abandon(handle, node_id)
        cancelling = not handle.done() and self._cancelled()
        preempting = not handle.done() and not cancelling
        if not handle.done():
            self.preempt_requested = False
            handle.cancel()
        try:
            reply = await handle
        except ActivityError as err:
            return _Cancelled(progress_of(err)) if cancelling else _classified(err, "generate")
        if preempting:
            # It finished before the cut reached it (a node hears of a cancellation at its next heartbeat):
            # the preemption cuts the step's next generation instead.
            self.preempt_requested = True
        return reply

    async def _abandon(self, handle: ActivityHandle[LlmStepResult], node_id: str) -> Generation:
        """Cut a generation on a revoked node, waiting a heartbeat timeout at most for it to stop (a reply it
        had finished, and booked before the revocation, still counts)."""
        handle.cancel()
        try:
            await workflow.wait_condition(handle.done, timeout=self.heartbeat_timeout)
        except TimeoutError:
            pass
        if handle.done() and handle.exception() is None:
            return handle.result()
        return Interrupted(revoked(node_id))

    async def _settle(
        self,
        rnd: _Round,
        grant: Placed,
        placement: StepPlacement | None,
        outcome: Generation | None,
        booked: BookedRound | None,
    ) -> Reply | Shortfall | StepCut | Interrupted | Failed:
        """The step's result as the ledger booked it (never as the node says), or why there is none."""
        assert outcome is not None
        if isinstance(outcome, _Cancelled):
            return await self._book_cut(rnd.inp, outcome.progress, grant.usd_per_1m_completion, grant.served_by)
        if not isinstance(outcome, (Reply, Shortfall)):
            return outcome
        charged = _as_booked(outcome, booked or BookedRound(), rnd.inp.checkpoint, placement)
        if charged is None:  # it answered without booking the call: a node to stop trusting with this step
            return Failed(None, "books", f"{grant.node_id} answered step {rnd.inp.step} without booking the call")
        self._inherited = None
        self.previous_replica = grant.replica_id
        self.context_tokens = charged.tokens_charged
        return charged

    async def _book_cut(
        self, inp: LlmStepInput, progress: GenerationProgress | None, usd_per_1m: float | None, served_by: str
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

    # ----- recovery --------------------------------------------------------------------------
    async def _recover(self, rnd: _Round, grant: Placed, outcome: Interrupted | Failed) -> None:
        """After an interruption, place the step again where the recovery rules allow; after a failure, keep
        the node out and retry, until the failures run out."""
        if isinstance(outcome, Interrupted):
            lost = outcome.interruption
            avoid = avoid_after(self.recovery, Cut(lost.kind, grant.node_id, grant.zone, grant.capacity))
            rnd.excluded.update({node: self.clock.now() for node in avoid.nodes})
            rnd.avoided_zones |= avoid.spot_zones
            rnd.pending, rnd.trouble = self._interrupted(lost, grant, rnd.inp.max_tokens), "preemption"
            await self._say(f"gpu: step {rnd.inp.step} resuming: {lost.detail} ({grant.node_id})", rnd.trouble)
            return
        if outcome.phase == "load":
            await self._load_failed(rnd, grant, outcome)
            return
        rnd.failures += 1
        refused = outcome.error is not None and books_refused(outcome.error)
        if outcome.phase == "books" or refused:  # the books would not (or did not) take this node's call
            rnd.excluded[grant.node_id] = self.clock.now()
        if outcome.error is not None and (
            (is_permanent(outcome.error) and not refused) or rnd.failures >= MAX_STEP_FAILURES
        ):
            raise outcome.error
        if rnd.failures >= MAX_STEP_FAILURES:
            raise Unplaceable(f"step {rnd.inp.step}: {outcome.detail} ({rnd.failures} times)")
        rnd.trouble = "crash_loop"
        await self._say(
            f"gpu: the model call failed on {grant.node_id} ({rnd.failures} of {MAX_STEP_FAILURES}): {outcome.detail}",
            rnd.trouble,
        )
        await workflow.sleep(timedelta(seconds=min(2**rnd.failures, 10)))
        self.clock.mark()

    async def _load_failed(self, rnd: _Round, grant: Placed, failed: Failed) -> None:
        rnd.excluded[grant.node_id] = self.clock.now()
        rnd.load_failures += 1
        workflow.logger.warning("load of %s on %s failed: %s", grant.replica_id, grant.node_id, failed.detail)
        if rnd.load_failures >= MAX_LOAD_FAILURES:
            raise Unplaceable(
                f"{rnd.request.model} failed to load {rnd.load_failures} times (on"
                f" {', '.join(rnd.excluded)}): {failed.detail}"
            ) from failed.error
        rnd.trouble = "crash_loop"
        await self._say(
            f"gpu: {rnd.request.model} failed to load on {grant.node_id} ({rnd.load_failures} of"
            f" {MAX_LOAD_FAILURES}): {failed.detail}",
            rnd.trouble,
        )

    def _interrupted(self, lost: Interruption, grant: Placed, max_tokens: int) -> _Pending:
        """Count an interruption (never against the retry budget) and keep what the generation had made."""
        self.interruptions += 1
        if lost.progress is not None:
            # The next placement continues the text it carries and books the rest as lost, never hides it.
            self._inherited = lost.progress
        workflow.logger.info("step interrupted on %s (%s): %s", grant.node_id, lost.kind, lost.detail)
        if self.interruptions > self.max_interruptions:
            raise Unplaceable(
                f"interrupted {self.interruptions} times (max_interruptions={self.max_interruptions});"
                f" last on {grant.node_id}: {lost.detail}"
            )
        generated = lost.progress.generated if lost.progress is not None else 0
        prefix = carried_prefix(lost.progress)
        # Every fleet engine continues a final assistant message (vLLM, SGLang, llama.cpp, the simulated one).
        kept = min(prefix.own_tokens, generated) if prefix is not None and continuable(prefix, max_tokens) else 0
        return _Pending(lost, grant, self.clock.now(), kept, generated - kept)

    async def _record(self, pending: _Pending, step: int, resumed: Placed) -> None:
        """Record an interruption once the step has a new place: where it was, what it lost, where it resumed."""
        await self._record_event(
            "interruption",
            {
                "step": step,
                "node_id": pending.grant.node_id,
                "replica_id": pending.grant.replica_id,
                "kind": pending.interruption.kind,
                "detail": pending.interruption.detail,
                "at": pending.at.isoformat(),
                "tokens_kept": pending.tokens_kept,
                "tokens_lost": pending.tokens_lost,
                "resumed_on": resumed.node_id,
                "resumed_replica": resumed.replica_id,
                "resumed_tier": resumed.tier,
                "resume_s": round((self.clock.now() - pending.at).total_seconds(), 3),
            },
        )

    async def _say(self, why: str | None, trouble: GpuTrouble | None) -> None:
        """Show why the step is not running (None: it runs again), writing the task state only on a change."""
        said = (why, trouble) if why is not None and trouble is not None else None
        if said != self._said:
            self._said = said
            await self._set_waiting(why, trouble)

    def _legacy_or_current(self, patch_id: str) -> bool:
        """A behaviour every run has, except version-0 runs whose history says they did not (code_versions.py)."""
        return self.workflow_version >= EVENT_CLOCK or legacy_patched(patch_id)

    # ----- off the fleet ---------------------------------------------------------------------
    async def _direct(self, inp: LlmStepInput) -> LlmStepResult | StepCut:
        """The generate activity off the fleet, retried by Temporal (on a node it is never retried: a retry
        would go back to the same node; failover and retries there are `generate`'s). A cancellation cuts it."""
        handle = workflow.start_activity(  # type: ignore[call-overload]  # a union result: temporalio says `type`, its converter takes the hint
            GENERATE_ACTIVITY,
            inp,
            result_type=LlmStepResult,
            start_to_close_timeout=GENERATE_TIMEOUT,
            heartbeat_timeout=GENERATE_HEARTBEAT,
            retry_policy=GENERATE_RETRY,
            cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
        )
        await self.clock.wait(lambda: handle.done() or self._cancelled())
        cancelling = not handle.done()
        if cancelling:
            handle.cancel()
        try:
            return await handle
        except ActivityError as err:
            if not cancelling:
                raise
            return await self._book_cut(inp, progress_of(err), None, "")


def still_excluded(excluded: dict[str, datetime], now: datetime) -> list[str]:
    """The nodes kept out of the step within EXCLUDE_NODE_FOR, oldest first."""
    return [node for node, at in sorted(excluded.items(), key=lambda item: item[1]) if now - at < EXCLUDE_NODE_FOR]


def _carrying(outcome: Generation, carried: GenerationProgress | None) -> Generation:
    """A continued quiet generation's cut, keeping the text it carried when the continuation itself reported
    nothing (its node died before it beat, or never picked it up): that text is still the step's to go on from."""
    if isinstance(outcome, Interrupted) and outcome.interruption.progress is None and carried is not None:
        return Interrupted(replace(outcome.interruption, progress=carried))
    return outcome


def _classified(err: ActivityError, phase: Literal["load", "generate"]) -> Interrupted | Failed:
    lost = interruption(err)
    return Interrupted(lost) if lost is not None else Failed(err, phase, _cause(err))


def _as_booked(
    reply: Reply | Shortfall, booked: BookedRound, checkpoint: CheckpointRef, placement: StepPlacement | None
) -> Reply | Shortfall | None:
    """The node's reply with the figures the ledger booked for the step's round in place of the node's own, the
    checkpoint this step sent, and where it ran; None for a reply whose call the node never booked."""
    if isinstance(reply, Shortfall):  # no call was made: whatever the round booked was for dead attempts
        return reply.model_copy(
            update={
                "kept_tokens": booked.kept_tokens,
                "cost_usd": booked.cost_usd,
                "lost_tokens": booked.tokens - booked.kept_tokens,
                "checkpoint": checkpoint,
                "placement": placement,
            }
        )
    if booked.settled_calls == 0:
        return None
    return reply.model_copy(
        update={
            "prompt_tokens": booked.prompt_tokens,
            "completion_tokens": booked.completion_tokens,
            "lost_tokens": booked.lost_tokens,
            "kept_tokens": booked.kept_tokens,
            "cost_usd": booked.cost_usd,
            "checkpoint": checkpoint,
            "placement": placement,
        }
    )


def _cause(err: BaseException) -> str:
    while err.__cause__ is not None:
        err = err.__cause__
    return str(err) or type(err).__name__


def next_step_of(reply: Reply) -> NextStep | None:
    """What the task does before its next step, told to the pool with the release (no extra round trip) so
    that the step finds its replica warm: it runs tools, starts sub-agents, or waits for a human. A reply
    without tool calls is the task's answer: no step follows."""
    calls = reply.tool_calls
    if not calls:
        return None
    if any(c.name == ASK_HUMAN_TOOL for c in calls):
        return NextStep(kind="awaiting_input")
    spawns = sum(1 for c in calls if c.name == SPAWN_AGENT_TOOL)
    return NextStep(kind="spawn", spawns=spawns) if spawns else NextStep(kind="tool_calls")
