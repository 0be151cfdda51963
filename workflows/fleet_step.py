"""A step's model call on the GPU fleet: acquire a lease, (wait for the load), generate, release.

    checkpoint(pending step)                local activity: the step's predecessor, written beside the store
    grant = acquire(lease request)          local activity, next to the pool
    load_replica on node/<id>               only while the leased replica is still loading
    generate on node/<id>                   heartbeats; bookkeeping inside, through the API
    release(lease) -> booked                local activity, whatever happened; says what the ledger booked

A node may lie, so nothing it says moves the task's books: it never writes the task's checkpoints
(the predecessor is written here first), the control plane bounds what it books by the lease's
limits (which this workflow sets), and the step is charged what the ledger booked, read back at
release, not what the node's reply claims. A reply the node never booked is a failed call.

While the pool cannot place the step it waits in the pool's queue: the task shows
`waiting_for_gpu` with the reason and its place, and asks again with a growing pause (short
at first, since a slot frees within seconds when a replica is merely busy; longer later, so a
task waiting an hour writes hundreds of events, not thousands). The task's `gpu_trouble` tells
why a step is not running: `capacity` (nothing free), `preemption` (its node went away and it
is being placed again) or `crash_loop` (its replica keeps failing to load or to answer). A load
that fails releases the lease and is placed again away from that node. Models the fleet does not serve (hosted
providers, a stack run without nodes) are called from the control queue without a lease.
"""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.workflow import ActivityCancellationType
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from activities.attempts import carried_prefix, continuable
    from activities.bookkeeping import TaskBookkeeping
    from activities.llm_step import LlmStepActivities
    from activities.pool_lease import PoolLeases
    from sdk._lease import BookedRound, LeaseGrant, LeaseRequest, ReleaseLease, StepLimits, StepPlacement, StepRound
    from sdk._node_io import LOAD_REPLICA, ReplicaReady, node_task_queue
    from sdk._state import GpuTrouble
    from sdk import CheckpointRef
    from sdk.contracts import CheckpointInput, LlmStepInput, LlmStepResult

    from .interruptions import Interruption, NodeRevoked, books_refused, interruption, is_permanent
    from .options import BOOKKEEPING

# A generation heartbeats every 0.5 s while tokens stream (every 2 s before them); by default 5 s of
# silence (`heartbeat_timeout_s` in the config) means its node or engine is gone, and the step resumes
# elsewhere (DESIGN.md: a preempted task loses seconds, not hours).
GENERATE_HEARTBEAT = timedelta(seconds=5)
GENERATE_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=10),
                             maximum_attempts=6)
NO_RETRY = RetryPolicy(maximum_attempts=1)
# A node's worker polls its queue all the time and takes every lease's call at once: one it has not
# picked up in this share of the heartbeat timeout means the node is gone (killed, cut off) before the
# pool has noticed. Kept under the heartbeat timeout, so a step sent to a dead node resumes as fast as
# one cut mid-stream.
NODE_PICKUP_SHARE = 0.8
# Failures (not interruptions) of one step's generation before the task fails, as GENERATE_RETRY.
MAX_STEP_FAILURES = 6
GENERATE_TIMEOUT = timedelta(minutes=10)
# A load heartbeats at every readiness probe; a 70B model from origin takes minutes.
LOAD_HEARTBEAT = timedelta(seconds=30)
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
# A node that failed a step is kept out of that step's placements this long: longer than the pool
# takes to mark a silent node lost (20 s by default), after which it filters the node itself; not for
# good, since a node that was only too busy to pick a call up must not strand a step that every
# other node has failed too.
EXCLUDE_NODE_FOR = timedelta(seconds=30)
# A model the fleet does not serve (a hosted provider, a stack without nodes) stays so: ask the
# pool again only every this many steps instead of spending a local activity on every step.
DIRECT_RECHECK_STEPS = 20


class Unplaceable(Exception):
    """No node could ever serve this step, its loads keep failing, or it was interrupted too often."""


@dataclass(frozen=True)
class _Pending:
    interruption: Interruption
    grant: LeaseGrant
    at: datetime
    tokens_kept: int
    tokens_lost: int


class FleetStep:
    """Runs one task's model calls on the fleet; remembers the replica that served the last step."""

    def __init__(self, set_waiting: Callable[[str | None, GpuTrouble | None], Awaitable[None]],
                 stop_waiting: Callable[[], bool],
                 on_interruption: Callable[[dict], Awaitable[None]], max_interruptions: int,
                 heartbeat_timeout: timedelta = GENERATE_HEARTBEAT, interruptions: int = 0,
                 placements_step: int = 0, placements_used: int = 0) -> None:
        self._set_waiting = set_waiting  # (None, None): waiting is over
        self._said: tuple[str, GpuTrouble] | None = None
        self._stop_waiting = stop_waiting
        self._on_interruption = on_interruption
        self.max_interruptions = max_interruptions
        self.heartbeat_timeout = heartbeat_timeout
        self.node_pickup = heartbeat_timeout * NODE_PICKUP_SHARE
        self.interruptions = interruptions  # across the task's runs (continue-as-new carries it)
        self._inherited: dict | None = None  # the last heartbeat of this step's interrupted generation
        self.preempt_requested = False  # a simulated preemption: cut the running generation off
        self.previous_replica: str | None = None
        # The next step's prompt re-sends the conversation: at least what the last step's prompt and answer held.
        self.context_tokens = 0
        self._direct_until: dict[str, int] = {}  # model → the step before which it is called without a lease
        self.gone_nodes: set[str] = set()  # revoked or removed while this task ran: never placed on again
        # The step whose placements were counted last, and how many it used (across its rounds).
        self.placements_step = placements_step
        self.placements_used = placements_used

    async def generate(self, inp: LlmStepInput, request: LeaseRequest) -> LlmStepResult | None:
        """The step's reply; None when the task must stop waiting (cancelled, deadline).

        Raises Unplaceable when no node could ever serve it, when loads keep failing, or when
        the task has been interrupted more than `max_interruptions` times; an ActivityError
        for a failure that retries did not fix.
        """
        if request.step < self._direct_until.get(request.model, 0):
            return await _generate(inp, task_queue=None)
        asked_at = workflow.now()
        excluded: dict[str, datetime] = {}  # node → when it failed this step
        avoided_zones: list[str] = []  # spot zones reclaimed under this step
        failures = load_failures = 0
        pending: _Pending | None = None  # an interruption waiting to be recorded with where the step resumed
        trouble: GpuTrouble = "capacity"
        # A step asked again (it waited for budget) is a new round: its attempts go on from the last round's.
        first_placement = self.placements_used if request.step == self.placements_step else 0
        self.placements_step = request.step
        round_first_attempt = first_placement * ATTEMPT_STRIDE + 1

        def asking(placement_index: int) -> LeaseRequest:  # made again at each ask: exclusions end while it waits
            return request.model_copy(update={
                "exclude_nodes": request.exclude_nodes + sorted(self.gone_nodes)
                + still_excluded(excluded, workflow.now()),
                "avoid_spot_zones": avoided_zones, "previous_replica": self.previous_replica,
                "prompt_tokens": self.context_tokens,
                "limits": StepLimits(max_tokens=inp.max_tokens, token_allowance=max(0, inp.token_allowance),
                                     usd_allowance=None if inp.usd_allowance is None else max(0.0, inp.usd_allowance),
                                     first_attempt=placement_index * ATTEMPT_STRIDE + 1,
                                     last_attempt=(placement_index + 1) * ATTEMPT_STRIDE,
                                     round_first_attempt=round_first_attempt)})

        for placement_index in itertools.count(first_placement):
            self.placements_used = placement_index + 1
            grant = await self._acquire(lambda: asking(placement_index), trouble)
            if grant is None:
                return None
            if grant.outcome == "direct":
                self._direct_until[request.model] = request.step + DIRECT_RECHECK_STEPS
                return await _generate(inp, task_queue=None)
            assert grant.lease_id is not None and grant.node_id is not None and grant.replica_id is not None
            if inp.pending is not None:
                # Written here, beside the store: a node reads the task's conversation, never writes it.
                inp = inp.model_copy(update={"checkpoint": await self._write_pending(inp), "pending": None})
            served = gone = False
            reply: LlmStepResult | None = None
            placement: StepPlacement | None = None
            try:
                load_s = 0.0
                if grant.load is not None:
                    load_started = workflow.now()
                    try:
                        await self._load(grant)
                    except (ActivityError, NodeRevoked) as err:
                        if pending is not None:  # placed here after an interruption; its load failed too
                            await self._record(pending, request.step, grant)
                            pending = None
                        gone = True
                        excluded[grant.node_id] = workflow.now()
                        lost = interruption(err)
                        if lost is not None:
                            avoided_zones += _reclaimed_spot_zone(lost, grant)
                            pending, trouble = self._interrupted(lost, grant, inp.max_tokens), "preemption"
                            await self._say(f"gpu: step {request.step} resuming: {lost.detail} ({grant.node_id})",
                                            trouble)
                            continue
                        assert isinstance(err, ActivityError)
                        load_failures += 1
                        workflow.logger.warning("load of %s on %s failed: %s", grant.replica_id, grant.node_id, err)
                        if load_failures >= MAX_LOAD_FAILURES:
                            raise Unplaceable(f"{request.model} failed to load {load_failures} times (on"
                                              f" {', '.join(excluded)}): {_cause(err)}") from err
                        trouble = "crash_loop"
                        await self._say(f"gpu: {request.model} failed to load on {grant.node_id} ({load_failures} of"
                                        f" {MAX_LOAD_FAILURES}): {_cause(err)}", trouble)
                        continue
                    load_s = (workflow.now() - load_started).total_seconds()
                if pending is not None:  # recorded once the step runs again: its resume time includes the load
                    await self._record(pending, request.step, grant)
                    pending = None
                placement = StepPlacement(
                    lease_id=grant.lease_id, node_id=grant.node_id, replica_id=grant.replica_id,
                    gpu_indexes=grant.gpu_indexes, gpu_type=grant.gpu_type, tier=grant.tier or "warm",
                    decided_by=grant.decided_by,
                    queue_wait_s=max(0.0, round((workflow.now() - asked_at).total_seconds() - load_s, 3)),
                    load_s=round(load_s, 3))
                try:
                    reply = await self._generate_on_node(inp.model_copy(update={
                        "placement": placement, "attempt_base": placement_index * ATTEMPT_STRIDE,
                        "inherited_progress": self._inherited}), grant.node_id)
                except (ActivityError, NodeRevoked) as err:
                    lost = interruption(err)
                    if lost is None:
                        assert isinstance(err, ActivityError)
                        failures += 1
                        refused = books_refused(err)
                        if refused:  # the control plane would not book this node's call: not this node again
                            excluded[grant.node_id] = workflow.now()
                        if (is_permanent(err) and not refused) or failures >= MAX_STEP_FAILURES:
                            raise
                        trouble = "crash_loop"
                        await self._say(f"gpu: the model call failed on {grant.node_id} ({failures} of"
                                        f" {MAX_STEP_FAILURES}): {_cause(err)}", trouble)
                        await workflow.sleep(timedelta(seconds=min(2 ** failures, 10)))
                        continue
                    gone = lost.replica_gone
                    if lost.kind != "replica_gone":
                        excluded[grant.node_id] = workflow.now()  # gone or going (or, simulated, would be)
                    avoided_zones += _reclaimed_spot_zone(lost, grant)
                    pending, trouble = self._interrupted(lost, grant, inp.max_tokens), "preemption"
                    await self._say(f"gpu: step {request.step} resuming: {lost.detail} ({grant.node_id})", trouble)
                    continue
                served = True
            finally:
                booked = await workflow.execute_local_activity_method(
                    PoolLeases.release,
                    ReleaseLease(lease_id=grant.lease_id, replica_warm=served, replica_gone=gone, booked_round=StepRound(
                        task_id=inp.task_id, step=inp.step, first_attempt=round_first_attempt) if served else None),
                    **BOOKKEEPING)
            assert reply is not None and placement is not None
            charged = _as_booked(reply, booked, inp, placement)
            if charged is None:  # it answered without booking the call: a node to stop trusting with this step
                failures += 1
                excluded[grant.node_id] = workflow.now()
                if failures >= MAX_STEP_FAILURES:
                    raise Unplaceable(f"step {request.step}: {grant.node_id} and others answered without booking"
                                      f" their calls ({failures} times)")
                workflow.logger.warning("node %s answered step %s without booking it", grant.node_id, request.step)
                continue
            self._inherited = None
            self.previous_replica = grant.replica_id
            self.context_tokens = charged.prompt_tokens + charged.completion_tokens
            return charged
        raise AssertionError("unreachable")

    def node_gone(self, node_id: str) -> None:
        """The control plane no longer trusts the node: a load or generation there is cut, and no placement of
        this task's goes there again."""
        self.gone_nodes.add(node_id)

    async def _write_pending(self, inp: LlmStepInput) -> CheckpointRef:
        assert inp.pending is not None
        return await workflow.execute_local_activity_method(
            TaskBookkeeping.checkpoint, CheckpointInput(task_id=inp.task_id, parent=inp.checkpoint, pending=inp.pending),
            **BOOKKEEPING)

    async def _load(self, grant: LeaseGrant) -> None:
        """Wait for the leased replica's load on its node, unless the node is revoked meanwhile."""
        assert grant.load is not None and grant.node_id is not None
        node_id = grant.node_id
        handle = workflow.start_activity(
            LOAD_REPLICA, grant.load, task_queue=node_task_queue(node_id), result_type=ReplicaReady,
            start_to_close_timeout=LOAD_TIMEOUT, schedule_to_start_timeout=self.node_pickup,
            heartbeat_timeout=LOAD_HEARTBEAT, retry_policy=LOAD_RETRY)
        await workflow.wait_condition(lambda: handle.done() or node_id in self.gone_nodes)
        if not handle.done():
            handle.cancel()
            raise NodeRevoked(node_id)
        await handle

    async def _generate_on_node(self, inp: LlmStepInput, node_id: str) -> LlmStepResult:
        """Generate on the node's queue; a simulated preemption arriving meanwhile cuts it off, and so does the
        node's revocation (a revoked node is not waited for: it may never answer the cancellation)."""
        handle = workflow.start_activity_method(
            LlmStepActivities.generate, inp, task_queue=node_task_queue(node_id), start_to_close_timeout=GENERATE_TIMEOUT,
            heartbeat_timeout=self.heartbeat_timeout, schedule_to_start_timeout=self.node_pickup, retry_policy=NO_RETRY,
            # Wait for the cut-off generation to report what it had generated, so its tokens are booked.
            cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED)
        await workflow.wait_condition(lambda: handle.done() or self.preempt_requested or node_id in self.gone_nodes)
        if not handle.done() and node_id in self.gone_nodes:
            handle.cancel()
            try:
                await workflow.wait_condition(handle.done, timeout=self.heartbeat_timeout)
            except TimeoutError:
                raise NodeRevoked(node_id) from None
            if handle.exception() is not None:
                raise NodeRevoked(node_id) from handle.exception()
        cut = not handle.done()
        if cut:
            self.preempt_requested = False
            handle.cancel()
        reply = await handle
        if cut:
            # It finished before the cut reached it (a node hears of a cancellation at its next heartbeat):
            # the preemption cuts the step's next generation instead.
            self.preempt_requested = True
        return reply

    def _interrupted(self, lost: Interruption, grant: LeaseGrant, max_tokens: int) -> _Pending:
        """Count an interruption (never against the retry budget) and keep what the generation had made."""
        self.interruptions += 1
        if lost.progress is not None:
            # The next placement continues the text it carries and books the rest as lost, never hides it.
            self._inherited = lost.progress
        workflow.logger.info("step interrupted on %s (%s): %s", grant.node_id, lost.kind, lost.detail)
        if self.interruptions > self.max_interruptions:
            raise Unplaceable(f"interrupted {self.interruptions} times (max_interruptions={self.max_interruptions});"
                              f" last on {grant.node_id}: {lost.detail}")
        generated = int((lost.progress or {}).get("generated", 0))
        prefix = carried_prefix(lost.progress)
        # Every fleet engine continues a final assistant message (vLLM, SGLang, the simulated one).
        kept = min(prefix.own_tokens, generated) if prefix is not None and continuable(prefix, max_tokens) else 0
        return _Pending(lost, grant, workflow.now(), kept, generated - kept)

    async def _record(self, pending: _Pending, step: int, resumed: LeaseGrant) -> None:
        """Record an interruption once the step has a new place: where it was, what it lost, where it resumed."""
        await self._on_interruption({
            "step": step, "node_id": pending.grant.node_id, "replica_id": pending.grant.replica_id,
            "kind": pending.interruption.kind, "detail": pending.interruption.detail, "at": pending.at.isoformat(),
            "tokens_kept": pending.tokens_kept, "tokens_lost": pending.tokens_lost,
            "resumed_on": resumed.node_id, "resumed_replica": resumed.replica_id, "resumed_tier": resumed.tier,
            "resume_s": round((workflow.now() - pending.at).total_seconds(), 3),
        })

    async def _say(self, why: str | None, trouble: GpuTrouble | None) -> None:
        """Show why the step is not running (None: it runs again), writing the task state only on a change."""
        said = (why, trouble) if why is not None and trouble is not None else None
        if said != self._said:
            self._said = said
            await self._set_waiting(why, trouble)

    async def _acquire(self, asking: Callable[[], LeaseRequest], trouble: GpuTrouble) -> LeaseGrant | None:
        """A lease; while the pool says wait, the task shows why (under `trouble`: what brought the step here)."""
        pause = WAIT_FIRST_S
        said: tuple[str | None, datetime] | None = None  # (wait reason, when) last shown
        while True:
            request = asking()
            grant = await workflow.execute_local_activity_method(PoolLeases.acquire, request, **BOOKKEEPING)
            if grant.outcome in ("placed", "direct"):
                await self._say(None, None)  # placed: the step runs (or waits for its replica's load) again
                return grant
            if grant.outcome == "never":
                raise Unplaceable(grant.reason or f"no node of this fleet can serve {request.model}")
            now = workflow.now()
            if said is None or said[0] != grant.wait_reason or now - said[1] >= PLACE_UPDATE_EVERY:
                await self._say(f"gpu: {grant.reason} (place {grant.queue_position} in the queue for"
                                f" {request.model})", trouble)
                said = (grant.wait_reason, now)
            try:
                await workflow.wait_condition(self._stop_waiting, timeout=timedelta(seconds=pause))
            except TimeoutError:
                pass
            if self._stop_waiting():
                return None
            pause = min(pause * 2, WAIT_MAX_S)


async def _generate(inp: LlmStepInput, task_queue: str | None) -> LlmStepResult:
    """The generate activity off the fleet, retried by Temporal (on a node it is never retried: a retry
    would go back to the same node; failover and retries there are `FleetStep.generate`'s)."""
    return await workflow.execute_activity_method(
        LlmStepActivities.generate, inp, task_queue=task_queue, start_to_close_timeout=GENERATE_TIMEOUT,
        heartbeat_timeout=GENERATE_HEARTBEAT, retry_policy=GENERATE_RETRY)


def _as_booked(reply: LlmStepResult, booked: BookedRound | None, inp: LlmStepInput,
               placement: StepPlacement) -> LlmStepResult | None:
    """The node's reply with the figures the ledger booked for the step's round in place of the node's own, the
    checkpoint this step sent, and where it ran; None for a reply whose call the node never booked."""
    if booked is None:
        booked = BookedRound()
    if reply.message is None and reply.shortfall_tokens is None:  # neither an answer nor a shortfall
        return None
    if reply.message is not None and booked.settled_calls == 0:
        return None
    if reply.message is None:  # no call was made (a shortfall): whatever the round booked was for nothing
        figures = {"prompt_tokens": 0, "completion_tokens": 0, "kept_tokens": booked.kept_tokens,
                   "lost_tokens": booked.tokens - booked.kept_tokens}
    else:
        figures = {"prompt_tokens": booked.prompt_tokens, "completion_tokens": booked.completion_tokens,
                   "lost_tokens": booked.lost_tokens, "kept_tokens": booked.kept_tokens}
    return reply.model_copy(update={**figures, "cost_usd": booked.cost_usd, "checkpoint": inp.checkpoint,
                                    "placement": placement})


def still_excluded(excluded: dict[str, datetime], now: datetime) -> list[str]:
    """The nodes that failed the step within EXCLUDE_NODE_FOR, oldest first."""
    return [node for node, at in sorted(excluded.items(), key=lambda item: item[1]) if now - at < EXCLUDE_NODE_FOR]


def _reclaimed_spot_zone(lost: Interruption, grant: LeaseGrant) -> list[str]:
    """The zone to keep this step's spot placements away from: a spot node's zone when the node went
    away (a cloud reclaims a zone's spot capacity together), else none."""
    if lost.kind in ("lost", "notice") and grant.capacity == "spot" and grant.zone:
        return [grant.zone]
    return []


def _cause(err: BaseException) -> str:
    while err.__cause__ is not None:
        err = err.__cause__
    return str(err) or type(err).__name__
