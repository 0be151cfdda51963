"""A step's round on the fleet as values: what the fleet step remembers, what it asks the pool, and what it does with
each answer. Pure functions of (state, outcome) -> decision; fleet_step.py issues the commands they decide on.

    FleetMemory  what the task's fleet step carries from step to step (and through continue-as-new)
    Round        one ask of a step on the fleet: its input, exclusions, failures, a pending interruption
    on_grant     the pool's answer -> Run | WaitInQueue | GiveUp

Settling a round's lease is fleet_settle.py's; what an interruption or a failure leads to, fleet_recovery.py's.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from sdk import CheckpointRef, GpuTrouble
    from sdk.wire.contracts import GenerationProgress, LlmStepInput, Reply, Shortfall
    from sdk.wire.lease import (
        Direct,
        LeaseGrant,
        LeaseRequest,
        Never,
        Placed,
        StepLimits,
        StepPlacement,
        call_extras_digest,
    )
    from sdk.wire.task_events import ReplicaLoaded, ReplicaLoading

    from .fleet_outcomes import Pending, Unplaceable

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


@dataclass(frozen=True)
class FleetMemory:
    """What a task's fleet step keeps from one step to the next."""

    interruptions: int = 0  # across the task's runs (continue-as-new carries it)
    # The step whose placements were counted last, and how many it used (across its rounds).
    placements_step: int = 0
    placements_used: int = 0
    previous_replica: str | None = None
    # The next step's prompt re-sends the conversation: at least what the last step's prompt and answer held.
    context_tokens: int = 0
    inherited: GenerationProgress | None = None  # the last heartbeat of this step's cut generation
    direct_until: tuple[tuple[str, int], ...] = ()  # model → the step before which it is called without a lease
    gone_nodes: frozenset[str] = frozenset()  # revoked or removed while this task ran: never placed on again

    def calls_direct(self, request: LeaseRequest) -> bool:
        return request.step < dict(self.direct_until).get(request.model, 0)

    def off_the_fleet(self, request: LeaseRequest) -> FleetMemory:
        """The pool said the fleet does not serve the model: call it without a lease for a while."""
        until = {**dict(self.direct_until), request.model: request.step + DIRECT_RECHECK_STEPS}
        return replace(self, direct_until=tuple(until.items()))

    def first_placement(self, step: int) -> int:
        """A step asked again (it waited for budget) is a new round: its placements go on from the last round's."""
        return self.placements_used if step == self.placements_step else 0

    def interrupted(self, progress: GenerationProgress | None) -> FleetMemory:
        """One more interruption (never counted against the retry budget); the next placement continues the text
        the cut generation carries, when it carries any, and books the rest as lost, never hides it."""
        inherited = progress if progress is not None else self.inherited
        return replace(self, interruptions=self.interruptions + 1, inherited=inherited)

    def served(self, grant: Placed, charged: Reply | Shortfall) -> FleetMemory:
        return replace(self, inherited=None, previous_replica=grant.replica_id, context_tokens=charged.tokens_charged)


@dataclass(frozen=True)
class Round:
    """One ask of a step on the fleet (a step asked again after waiting for budget is a new round)."""

    inp: LlmStepInput
    request: LeaseRequest
    asked_at: datetime
    first_attempt: int
    excluded: dict[str, datetime] = field(default_factory=dict)  # node → when the recovery rules sent it away
    avoided_zones: frozenset[str] = frozenset()
    failures: int = 0
    load_failures: int = 0
    pending: Pending | None = None
    trouble: GpuTrouble = "capacity"

    @classmethod
    def starting(cls, inp: LlmStepInput, request: LeaseRequest, now: datetime, first_placement: int) -> Round:
        return cls(inp, request, now, first_attempt=first_placement * ATTEMPT_STRIDE + 1)

    def with_predecessor(self, checkpoint: CheckpointRef) -> Round:
        """The step's predecessor is written: its input points at it and carries nothing left to write."""
        return replace(self, inp=self.inp.model_copy(update={"checkpoint": checkpoint, "pending": None}))


def still_excluded(excluded: dict[str, datetime], now: datetime) -> list[str]:
    """The nodes kept out of the step within EXCLUDE_NODE_FOR, oldest first."""
    return [node for node, at in sorted(excluded.items(), key=lambda item: item[1]) if now - at < EXCLUDE_NODE_FOR]


def asking(rnd: Round, index: int, memory: FleetMemory, now: datetime, quiet_after: timedelta) -> LeaseRequest:
    """The lease request of the round's `index`-th placement, made again at each ask: exclusions end while it waits."""
    inp = rnd.inp
    return rnd.request.model_copy(
        update={
            "exclude_nodes": rnd.request.exclude_nodes + sorted(memory.gone_nodes) + still_excluded(rnd.excluded, now),
            "avoid_spot_zones": sorted(rnd.avoided_zones),
            "previous_replica": memory.previous_replica,
            "prompt_tokens": memory.context_tokens,
            "limits": StepLimits(
                max_tokens=inp.max_tokens,
                token_allowance=inp.token_allowance,  # a TokenAllowance: never below 0
                usd_allowance=None if inp.usd_allowance is None else max(0.0, inp.usd_allowance),
                first_attempt=index * ATTEMPT_STRIDE + 1,
                last_attempt=(index + 1) * ATTEMPT_STRIDE,
                round_first_attempt=rnd.first_attempt,
                call_extras=call_extras_digest(inp.instructions, inp.tools),
                quiet_after_s=quiet_after.total_seconds(),  # the activity's input only: no command changes
            ),
        }
    )


@dataclass(frozen=True)
class Waiting:
    """A step in the pool's queue: the pause before its next ask, and the reason it last showed (and when)."""

    pause_s: float = WAIT_FIRST_S
    shown: tuple[str, datetime] | None = None


@dataclass(frozen=True)
class Run:
    """Placed (or told to call the model off the fleet): the step runs."""

    grant: Placed | Direct


@dataclass(frozen=True)
class WaitInQueue:
    """Not placed yet: show `say` (None: what the task shows still holds), pause, and ask again."""

    say: str | None
    pause: timedelta
    then: Waiting


@dataclass(frozen=True)
class GiveUp:
    error: BaseException


def on_grant(grant: LeaseGrant, waiting: Waiting, request: LeaseRequest, now: datetime) -> Run | WaitInQueue | GiveUp:
    """What the step does with the pool's answer. While it waits the task shows why and its place in the queue,
    rewritten when the reason changes or PLACE_UPDATE_EVERY has passed; its pauses double up to WAIT_MAX_S."""
    if isinstance(grant, (Placed, Direct)):
        return Run(grant)
    if isinstance(grant, Never):
        return GiveUp(Unplaceable(grant.reason))
    shown, say = waiting.shown, None
    if shown is None or shown[0] != grant.wait_reason or now - shown[1] >= PLACE_UPDATE_EVERY:
        say = f"gpu: {grant.reason} (place {grant.queue_position} in the queue for {request.model})"
        shown = (grant.wait_reason, now)
    then = Waiting(min(waiting.pause_s * 2, WAIT_MAX_S), shown)
    return WaitInQueue(say, timedelta(seconds=waiting.pause_s), then)


_WEIGHTS_FROM = {
    "disk": "weights from its disk",
    "datacenter": "weights from a peer in its datacenter",
    "origin": "weights from origin",
    "loading": "its load had already begun",
}


def loading_notice(grant: Placed, model: str) -> str:
    """What the task shows while its step waits for the leased replica's load: a cold start takes minutes."""
    return f"a cold start: {model} loading on {grant.node_id} ({_WEIGHTS_FROM.get(grant.tier, grant.tier)})"


def loading_record(grant: Placed, model: str) -> ReplicaLoading:
    return ReplicaLoading(node_id=grant.node_id, replica_id=grant.replica_id, model=model, tier=grant.tier)


def loaded_record(grant: Placed, seconds: float) -> ReplicaLoaded:
    return ReplicaLoaded(node_id=grant.node_id, replica_id=grant.replica_id, seconds=round(seconds, 2))


def placement_of(rnd: Round, grant: Placed, load_s: float, now: datetime) -> StepPlacement:
    """Where the step runs, and how long it waited for it (in the queue, then for its replica's load)."""
    return StepPlacement(
        lease_id=grant.lease_id,
        node_id=grant.node_id,
        replica_id=grant.replica_id,
        gpu_indexes=grant.gpu_indexes,
        gpu_type=grant.gpu_type,
        tier=grant.tier,
        decided_by=grant.decided_by,
        queue_wait_s=max(0.0, round((now - rnd.asked_at).total_seconds() - load_s, 3)),
        load_s=round(load_s, 3),
    )


def generation_input(
    rnd: Round, placement: StepPlacement, index: int, inherited: GenerationProgress | None
) -> LlmStepInput:
    """The generate activity's input on the round's `index`-th placement, continuing what a cut generation wrote."""
    return rnd.inp.model_copy(
        update={"placement": placement, "attempt_base": index * ATTEMPT_STRIDE, "inherited_progress": inherited}
    )
