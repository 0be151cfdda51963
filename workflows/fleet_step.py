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
there. How long a busy node keeps the step is the suspect-node rules' call; where an interrupted step goes
next, the task's recovery rules': sdk/wire/recovery.py holds both, and `berth simulate` replays the same code.

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
from dataclasses import replace
from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from sdk import GpuTrouble
    from sdk.wire.contracts import LlmStepInput, LlmStepResult, Reply, Shortfall
    from sdk.wire.lease import Direct, LeaseGrant, LeaseRequest, Placed, StepPlacement
    from sdk.wire.recovery import DEFAULT_RECOVERY, RecoveryRule, Suspect
    from sdk.wire.task_events import EventWriter

    from .code_versions import EVENT_CLOCK, LEGACY, legacy_patched
    from .event_clock import EventClock
    from .fleet_calls import (
        GENERATE_HEARTBEAT,
        abandon,
        acquire_lease,
        acquire_step,
        book_cut,
        load_on_node,
        node_liveness,
        off_the_fleet,
        release_lease,
        start_generation,
        write_predecessor,
    )
    from .fleet_outcomes import (
        Cancelled,
        Failed,
        Generation,
        Interrupted,
        Pending,
        StepCut,
        Unplaceable,
        carrying,
        classified,
    )
    from .fleet_recovery import (
        Conclude,
        ContinueQuiet,
        WaitForPickup,
        Weighed,
        after_failure,
        after_interruption,
        after_load_failure,
        continued_quietly,
        interruption_record,
        quiet_notice,
        quiet_record,
        suspected,
        weigh,
    )
    from .fleet_round import (
        FleetMemory,
        GiveUp,
        Round,
        Run,
        Waiting,
        asking,
        generation_input,
        loaded_record,
        loading_notice,
        loading_record,
        on_grant,
        placement_of,
    )
    from .fleet_settle import release_of, settled
    from .interruptions import Interruption, progress_of

# What the agent task and the benchmarks import from here, where they always have.
__all__ = ["GENERATE_HEARTBEAT", "FleetStep", "StepCut", "Unplaceable"]

# A node's worker polls its queue all the time: a call not picked up in this share of the heartbeat timeout
# makes the step ask for evidence about the node (kept under it, so a dead node is found as fast as mid-stream).
NODE_PICKUP_SHARE = 0.8
# The patches that added two behaviours, in version-0 runs' histories (code_versions.py): a step's predecessor is
# written by its first lease ask (one local activity, not two), and a load says so in the task's state and events.
PREDECESSOR_WITH_ACQUIRE = "predecessor-with-acquire"
REPORTS_LOADS = "reports-loads"
Settled = Reply | Shortfall | StepCut | Interrupted | Failed


class FleetStep:
    """Runs one task's model calls on the fleet; remembers the replica that served the last step. Each phase's
    decision is a pure function (fleet_round.py, fleet_recovery.py, fleet_settle.py) of the step's state (FleetMemory,
    Round) and the phase's outcome; this class issues the commands the decisions call for, in the order they did."""

    def __init__(
        self,
        set_waiting: Callable[[str | None, GpuTrouble | None], Awaitable[None]],
        stop_waiting: Callable[[], bool],
        cancelled: Callable[[], bool],
        record_event: EventWriter,
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
        self._record_event = record_event  # an event in the task's log, beside its state
        self.clock = clock  # the task's: what decisions read as now (code_versions.py, rule 3)
        self.workflow_version = workflow_version
        self.max_interruptions = max_interruptions
        self.heartbeat_timeout = heartbeat_timeout
        self.node_pickup = heartbeat_timeout * NODE_PICKUP_SHARE
        self.recovery = tuple(recovery)
        self.preempt_requested = False  # a simulated preemption: cut the running generation off
        self.memory = FleetMemory(
            interruptions=interruptions, placements_step=placements_step, placements_used=placements_used
        )

    @property
    def interruptions(self) -> int:
        return self.memory.interruptions

    @property
    def placements_step(self) -> int:
        return self.memory.placements_step

    @property
    def placements_used(self) -> int:
        return self.memory.placements_used

    async def generate(self, inp: LlmStepInput, request: LeaseRequest) -> LlmStepResult | StepCut | None:
        """The step's reply (or shortfall); a StepCut when the task's cancellation cut it; None when the task
        must stop waiting for a GPU (cancelled, deadline).

        Raises Unplaceable when no node could ever serve it, when loads keep failing, or when the task has
        been interrupted more than `max_interruptions` times; an ActivityError for a failure that retries
        did not fix.
        """
        if self.memory.calls_direct(request):
            return await off_the_fleet(inp, self.clock, self._cancelled)
        first_placement = self.memory.first_placement(request.step)
        self.memory = replace(self.memory, placements_step=request.step)
        rnd = Round.starting(inp, request, self.clock.now(), first_placement)
        for index in itertools.count(first_placement):
            self.memory = replace(self.memory, placements_used=index + 1)
            placed = await self._acquire(rnd, index)
            if placed is None:
                return None
            grant, rnd = placed
            if isinstance(grant, Direct):
                self.memory = self.memory.off_the_fleet(request)
                return await off_the_fleet(rnd.inp, self.clock, self._cancelled)
            rnd = await self._checkpoint(rnd)
            outcome, rnd = await self._on_lease(rnd, grant, index)
            if isinstance(outcome, (Reply, Shortfall)):
                self.memory = self.memory.served(grant, outcome)
            if isinstance(outcome, (Reply, Shortfall, StepCut)):
                return outcome
            rnd = await self._recover(rnd, grant, outcome)
        raise AssertionError("unreachable")

    def node_gone(self, node_id: str) -> None:
        """The control plane no longer trusts the node: a load or generation there is cut, and no placement of
        this task's goes there again."""
        self.memory = replace(self.memory, gone_nodes=self.memory.gone_nodes | {node_id})

    # ----- reserve and acquire ---------------------------------------------------------------
    async def _acquire(self, rnd: Round, index: int) -> tuple[Placed | Direct, Round] | None:
        """A lease; while the pool says wait, the task shows why (under the trouble that brought the step here)."""
        waiting = Waiting()
        while True:
            request = asking(rnd, index, self.memory, self.clock.now(), self.heartbeat_timeout)
            grant, rnd = await self._ask(rnd, request)
            decision = on_grant(grant, waiting, request, self.clock.now())
            if isinstance(decision, GiveUp):
                raise decision.error
            if isinstance(decision, Run):
                await self._say(None, None)  # placed: the step runs (or waits for its replica's load) again
                return decision.grant, rnd
            if decision.say is not None:
                await self._say(decision.say, rnd.trouble)
            await self.clock.wait(self._stop_waiting, timeout=decision.pause)
            if self._stop_waiting():
                return None
            waiting = decision.then

    async def _ask(self, rnd: Round, request: LeaseRequest) -> tuple[LeaseGrant, Round]:
        """Ask the pool for a lease. The step's first ask carries its predecessor, written in the same local activity
        (workflows that began before it did wrote it apart, after placement: `_checkpoint`)."""
        if rnd.inp.pending is None or not self._legacy_or_current(PREDECESSOR_WITH_ACQUIRE):
            return await acquire_lease(request), rnd
        asked = await acquire_step(request, rnd.inp)
        return asked.grant, rnd.with_predecessor(asked.checkpoint)

    async def _checkpoint(self, rnd: Round) -> Round:
        """The step's predecessor, where the lease ask did not write it."""
        if rnd.inp.pending is None:
            return rnd
        return rnd.with_predecessor(await write_predecessor(rnd.inp))

    # ----- on the lease: load, generate, settle ----------------------------------------------
    async def _on_lease(self, rnd: Round, grant: Placed, index: int) -> tuple[Settled, Round]:
        """Load (if need be) and generate under the lease; release it whatever happened, and settle: the step's
        result as the ledger booked it (never as the node says), or why there is none."""
        outcome: Generation | None = None
        placement: StepPlacement | None = None
        try:
            loaded, rnd = await self._load(rnd, grant)
            if isinstance(loaded, float):
                rnd = await self._resumed(rnd, grant)  # its resume time includes the load
                placement = placement_of(rnd, grant, loaded, self.clock.now())
                outcome = await self._generate(rnd, grant, placement, index)
            else:
                outcome = loaded
        finally:
            booked = await release_lease(release_of(rnd, grant, placement, outcome))
        assert outcome is not None
        if isinstance(outcome, Cancelled):  # what the cut generation had written is booked as lost
            return await book_cut(rnd.inp, outcome.progress, grant.usd_per_1m_completion, grant.served_by), rnd
        return settled(rnd, grant, placement, outcome, booked), rnd

    async def _load(self, rnd: Round, grant: Placed) -> tuple[float | Interrupted | Failed | Cancelled, Round]:
        """Seconds spent waiting for the leased replica's load on its node (0 when it is warm). While it loads the
        task says so (`waiting_for_gpu`, a `replica_loading` event, then `replica_loaded` with its seconds): a
        large model's cold start takes minutes, which showed as plain `running`. (Runs that began before this
        report nothing, as their histories have it.)"""
        if grant.load is None:
            return 0.0, rnd
        reports = self._legacy_or_current(REPORTS_LOADS)
        if reports:
            await self._record_event(loading_record(grant, grant.load.model.name))
            await self._set_waiting(loading_notice(grant, grant.load.model.name), None)
        try:
            loaded, rnd = await self._load_until_ready(rnd, grant)
        finally:
            if reports:
                await self._set_waiting(None, None)
        if reports and isinstance(loaded, float):
            await self._record_event(loaded_record(grant, loaded))
        return loaded, rnd

    async def _load_until_ready(
        self, rnd: Round, grant: Placed
    ) -> tuple[float | Interrupted | Failed | Cancelled, Round]:
        """`_load`'s wait. A busy node that has not picked the load up yet is waited for, as a generation is (loads
        are idempotent per replica). A cancelled task stops waiting; the load goes on for the other steps that
        lease the replica."""
        started, suspect = self.clock.now(), Suspect(continuable=False)
        while True:
            failed = await load_on_node(
                grant, self.node_pickup, self.clock, lambda: grant.node_id in self.memory.gone_nodes, self._cancelled
            )
            if failed is None:
                return (self.clock.now() - started).total_seconds(), rnd
            if isinstance(failed, Cancelled):
                return failed, rnd
            weighed = await self._weigh(failed, grant.node_id, suspect, "its load")
            if isinstance(weighed, WaitForPickup):
                suspect = weighed.suspect
                continue
            assert isinstance(weighed, Conclude)  # a load is never continued in place (not `continuable`)
            assert isinstance(weighed.outcome, (Interrupted, Failed))
            return weighed.outcome, await self._resumed(rnd, grant)  # placed here after an interruption, in vain

    async def _weigh(self, outcome: Generation, node_id: str, suspect: Suspect, what: str) -> Weighed:
        """A timeout weighed against the pool's evidence about its node (the suspect-node rules decide); any other
        outcome concludes the phase as it is."""
        lost = suspected(outcome)
        if lost is None:
            return Conclude(outcome)
        weighed = weigh(lost, await node_liveness(node_id), suspect, node_id, what)
        if isinstance(weighed, WaitForPickup):
            await self._say(weighed.say, "capacity")
        return weighed

    async def _generate(self, rnd: Round, grant: Placed, placement: StepPlacement, index: int) -> Generation:
        """Generate on the node; a timeout there is weighed against the evidence about the node before the step
        is given up on it: a busy node's call is waited for, and a quiet generation on a live node is continued
        there, on the same lease, as often as the suspect-node rules allow before it counts as `stalled`."""
        inp = generation_input(rnd, placement, index, self.memory.inherited)
        suspect = Suspect()
        while True:
            outcome = await self._generate_on_node(inp, grant.node_id)
            weighed = await self._weigh(outcome, grant.node_id, suspect, f"step {inp.step}'s call")
            if isinstance(weighed, WaitForPickup):
                suspect = weighed.suspect
            elif isinstance(weighed, ContinueQuiet):
                suspect = weighed.suspect
                inp = await self._continue_quiet(inp, grant, weighed.lost, suspect.quiet)
            else:
                if suspect.quiet and isinstance(weighed.outcome, (Reply, Shortfall)):
                    await self._say(None, None)  # it answered: the step no longer waits on the node
                return carrying(weighed.outcome, inp.inherited_progress) if suspect.quiet else weighed.outcome

    async def _continue_quiet(self, inp: LlmStepInput, grant: Placed, lost: Interruption, quiet: int) -> LlmStepInput:
        """A generation whose heartbeats went quiet on a node that is alive (a busy machine) goes on there: the
        next attempt of the same lease continues the text its last heartbeat carried, as a new placement would,
        without giving up the replica, its warm prefix or the step's place. It is said and recorded, not hidden."""
        continued = continued_quietly(inp, lost)
        await self._say(quiet_notice(inp, grant, lost, quiet), "capacity")
        await self._record_event(quiet_record(continued, grant, lost, quiet, self.clock.now()))
        self.memory = replace(self.memory, inherited=continued.inherited_progress)
        return continued

    async def _generate_on_node(self, inp: LlmStepInput, node_id: str) -> Generation:
        """One generate activity on the node's queue. A simulated preemption, the node's revocation or the task's
        cancellation cuts it off (a revoked node is not waited for: it may never answer the cancellation)."""
        assert inp.placement is not None
        handle = start_generation(inp, node_id, self.heartbeat_timeout, self.node_pickup)
        # The reply, or the signal that cuts it: a moment history fixes (the clock moves).
        await self.clock.wait(
            lambda: handle.done() or self.preempt_requested or node_id in self.memory.gone_nodes or self._cancelled()
        )
        if not handle.done() and node_id in self.memory.gone_nodes:
            return await abandon(handle, node_id, self.heartbeat_timeout)
        cancelling = not handle.done() and self._cancelled()
        preempting = not handle.done() and not cancelling
        if not handle.done():
            self.preempt_requested = False
            handle.cancel()
        try:
            reply = await handle
        except ActivityError as err:
            return Cancelled(progress_of(err)) if cancelling else classified(err, "generate")
        if preempting:
            # It finished before the cut reached it (a node hears of a cancellation at its next heartbeat):
            # the preemption cuts the step's next generation instead.
            self.preempt_requested = True
        return reply

    # ----- recovery --------------------------------------------------------------------------
    async def _recover(self, rnd: Round, grant: Placed, outcome: Interrupted | Failed) -> Round:
        """After an interruption, place the step again where the recovery rules allow; after a failure, keep
        the node out and retry, until the failures run out."""
        now = self.clock.now()
        if isinstance(outcome, Interrupted):
            lost = outcome.interruption
            self.memory = self.memory.interrupted(lost.progress)
            workflow.logger.info("step interrupted on %s (%s): %s", grant.node_id, lost.kind, lost.detail)
            interruptions, most = self.memory.interruptions, self.max_interruptions
            decision = after_interruption(rnd, grant, lost, self.recovery, now, interruptions, most)
        elif outcome.phase == "load":
            workflow.logger.warning("load of %s on %s failed: %s", grant.replica_id, grant.node_id, outcome.detail)
            decision = after_load_failure(rnd, grant, outcome, now)
        else:
            decision = after_failure(rnd, grant, outcome, now)
        if isinstance(decision, GiveUp):
            raise decision.error
        await self._say(decision.say, decision.round.trouble)
        if decision.pause is not None:
            await workflow.sleep(decision.pause)
            self.clock.mark()
        return decision.round

    async def _resumed(self, rnd: Round, grant: Placed) -> Round:
        """The round once its step has a new place: a pending interruption is recorded with where it resumed."""
        if rnd.pending is None:
            return rnd
        await self._record(rnd.pending, rnd.request.step, grant)
        return replace(rnd, pending=None)

    async def _record(self, pending: Pending, step: int, resumed: Placed) -> None:
        """Record an interruption once the step has a new place: where it was, what it lost, where it resumed."""
        await self._record_event(interruption_record(pending, step, resumed, self.clock.now()))

    async def _say(self, why: str | None, trouble: GpuTrouble | None) -> None:
        """Show why the step is not running (None: it runs again), writing the task state only on a change."""
        said = (why, trouble) if why is not None and trouble is not None else None
        if said != self._said:
            self._said = said
            await self._set_waiting(why, trouble)

    def _legacy_or_current(self, patch_id: str) -> bool:
        """A behaviour every run has, except version-0 runs whose history says they did not (code_versions.py)."""
        return self.workflow_version >= EVENT_CLOCK or legacy_patched(patch_id)
