"""The discrete-event simulation: virtual time, one event heap, the pool's own data structures.

The fleet is the pool's `FleetState`, the wait queue its `WaitQueue`, loads take what the placement
scorers predict (`scorers.load_seconds`: the simulated world is the one the scorers model), and a
policy (policies.py) makes the placement and scaling decisions. What the live system does between
them is played out here: a replica loads then serves; a call's prompt is prefilled (only its new part
on the replica that served the session's previous call: the prefix cache) and its answer decoded at
the rate its replica's batch allows (`sequence_rate`: a lone sequence decodes several times faster than
each of a full batch's, and every call on a replica speeds up or slows down as the batch changes); a
waiting step asks again whenever something frees up and at every scaler tick; a spot node's notice
cuts its generations, which continue elsewhere keeping what they wrote (without notice, the tokens
written since the last heartbeat are lost), as Berth's workflow does. A node whose engines go quiet while it
stays alive (a stall) holds its generations: each is continued there or given up as `stalled` by the very
suspect-node rules the workflow asks (`Suspect` in sdk/wire/recovery.py). A session announces its next
step when a call ends in tool calls, a sub-agent or a turn's answer (interactive and batch work only),
as the live workflow does on its lease's release; the policy's scaler may act on it.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import math
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from sdk.wire.recovery import Cut, Liveness, Suspect, avoid_after

from ..pool.admission import defers_to_a_busy_replica, load_in_flight, may_go
from ..pool.decision import Decision, PlacementRequest
from ..pool.fleet import Booking, FleetState, ModelSpec
from ..pool.intents import IntentKind
from ..pool.queue import WaitQueue
from ..pool.scaler import ModelDemand, ScaleDown, ScaleUp
from ..pool.scorers import load_seconds
from ..pool.serving_speed import judge, sequence_rate
from .fleet_file import FleetFile
from .floor import floor_gpu_hours
from .plan import CallPlan, SessionPlan, Workload
from .policies import Policy
from .results import CallRecord, PreemptionRecord, ReplicaRecord, SessionRecord, SimResult, StallRecord


@dataclass(frozen=True)
class SimSettings:
    tick_s: float = 2.0  # the scaler's period (orchestrator/pool/autoscaler.py TICK_S)
    heartbeat_s: float = 0.5  # a generating step reports its tokens this often: what a kill without notice loses
    # A generation silent this long makes the workflow ask the pool about its node (workflows/fleet_calls.py
    # GENERATE_HEARTBEAT, a task's `heartbeat_timeout_s`): a stalled engine is noticed this long after it went quiet.
    heartbeat_timeout_s: float = 5.0
    spot_return_s: float = 600.0  # a reclaimed spot node comes back, with an empty disk, this much later
    # A lone sequence decodes this many times faster than each sequence of a full batch: decode is
    # memory-bound, so a step's time is mostly reading the weights once, whatever the batch (vLLM serving
    # an 8B model on an H100 writes ~120 tokens/s for one sequence and ~30 each for 32).
    single_stream_gain: float = 4.0


DEFAULT_SETTINGS = SimSettings()


@dataclass
class _Session:
    plan: SessionPlan
    record: SessionRecord
    parent: _Session | None = None
    index: int = 0
    tokens_so_far: int = 0  # prompt and completion tokens of its finished calls: what a restart redoes
    previous_replica: str | None = None


@dataclass
class _Call:
    session: _Session
    plan: CallPlan
    record: CallRecord
    prompt: int
    remaining: float  # tokens still to write, as of `decoded_at`
    exclude_nodes: set[str] = field(default_factory=set)
    avoid_spot_zones: set[str] = field(default_factory=set)
    booking: Booking | None = None
    generation: int = 0  # bumped when a generation is cut, so its finish event is ignored
    first_token_s: float = 0.0
    rate: float = 0.0  # tokens/s of its generation, at its replica's batch size now
    decoded_at: float = 0.0  # when `remaining` was last brought up to date
    written: float = 0.0  # tokens written in this generation (since it was served on its replica)
    waiting_since: float | None = None  # when it joined the wait queue (its place in line)
    # When it began waiting for a slot with no load of its model in flight: the wait more capacity would cut.
    slot_wait_since: float | None = None
    suspect: Suspect = field(default_factory=Suspect)  # what its lease's node was given while suspect (a stall)
    watch: int = 0  # bumped at each look for its silence, so only the latest look acts

    @property
    def key(self) -> str:
        return self.session.plan.session_id


@dataclass
class _Replica:
    record: ReplicaRecord
    serving: int = 0
    busy_since: float | None = None
    waiting: list[_Call] = field(default_factory=list)  # leased while it loads


class Simulation:
    def __init__(
        self,
        fleet: FleetFile,
        models: Mapping[str, ModelSpec],
        workload: Workload,
        policy: Policy,
        seed: int = 0,
        settings: SimSettings = DEFAULT_SETTINGS,
    ) -> None:
        unknown = sorted(set(workload.models) - set(models))
        if unknown:
            raise ValueError(
                f"workload: model {unknown[0]!r} is not in the catalogue; known: {', '.join(sorted(models))}"
            )
        self.workload = workload
        self.policy = policy
        self.settings = settings
        self.config = fleet.placement_config()
        self.fleet = FleetState(replica_prefix="sim-r")
        self.disk_gib: dict[str, float] = {}
        for node, cache_gib in fleet.expand():
            self.fleet.add_node(node)
            self.disk_gib[node.id] = cache_gib
        for name in workload.models:  # only what the traffic uses: a catalogue model nobody calls is no replica
            self.fleet.add_model(models[name])
        # Each model's replica cap, read once: placement is asked it on every (re)try.
        self._max_replicas = {name: policy.scaling(name, models[name]).max_replicas for name in workload.models}
        self.queue = WaitQueue()
        self.result = SimResult(
            policy=policy.name,
            seed=seed,
            horizon_s=workload.duration_s,
            end_s=0.0,
            floor_gpu_hours=floor_gpu_hours(workload, models, self.fleet, self.config),
        )
        self.now = 0.0
        self._heap: list[tuple[float, int, Callable[..., None], tuple]] = []
        self._seq = itertools.count()
        self._waiting: dict[str, dict[str, _Call]] = {}  # model → session id → call waiting for a lease
        self._replicas: dict[str, _Replica] = {}
        self._serving: dict[str, set[int]] = {}  # replica id → ids of calls it is generating for
        self._calls: dict[int, _Call] = {}
        self._disk: dict[str, OrderedDict[str, float]] = {n: OrderedDict() for n in self.fleet.nodes}
        # Which replicas hold each GPU (node, index), for the contention of replicas sharing one.
        self._on_device: dict[tuple[str, int], set[str]] = {}
        self._devices_of: dict[str, list[tuple[str, int]]] = {}
        self.idle_since: dict[str, float] = {}
        self.intents = policy.foresight.intents if policy.foresight is not None else None
        self.traffic = policy.foresight.traffic if policy.foresight is not None else None
        self._open_sessions = 0
        self._arrivals_left = len(workload.sessions)
        self._stalled: dict[str, tuple[float, StallRecord]] = {}  # node → when its engines beat again, and its stall

    # --- the loop ----------------------------------------------------------------------------

    def run(self) -> SimResult:
        self._preload()
        for plan in self.workload.sessions:
            self._at(plan.arrival_s, self._arrive, plan, None)
        for node_id, preemptions in sorted(self.workload.preemptions.items()):
            if node_id not in self.fleet.nodes:
                raise ValueError(f"workload.preemptions: no node {node_id!r} in the fleet")
            for at, notice in preemptions:
                self._at(at, self._notice, node_id, notice)
        for node_id, stalls in sorted(self.workload.stalls.items()):
            if node_id not in self.fleet.nodes:
                raise ValueError(f"workload.stalls: no node {node_id!r} in the fleet")
            for at, seconds in stalls:
                self._at(at, self._stall, node_id, seconds)
        self._at(0.0, self._tick)
        while self._heap:
            at, _, fn, args = heapq.heappop(self._heap)
            self.now = at
            fn(*args)
        self.result.end_s = max((s.ended_s or 0.0 for s in self.result.sessions), default=0.0)
        for rep in self._replicas.values():
            self._close_busy(rep, self.result.end_s)
        return self.result

    def _at(self, at: float, fn: Callable[..., None], *args: object) -> None:
        heapq.heappush(self._heap, (at, next(self._seq), fn, args))

    def _timed(self, fn: Callable[[], Decision]) -> Decision:
        started = time.perf_counter()
        try:
            return fn()
        finally:
            self.result.decision_seconds += time.perf_counter() - started

    # --- sessions and calls ----------------------------------------------------------------

    def _arrive(self, plan: SessionPlan, parent: _Session | None) -> None:
        if parent is None:
            self._arrivals_left -= 1
        record = SessionRecord(plan.session_id, self.now, parent=parent.plan.session_id if parent else None)
        self.result.sessions.append(record)
        self._open_sessions += 1
        self._issue(_Session(plan, record, parent))

    def _issue(self, session: _Session) -> None:
        plan = session.plan.calls[session.index]
        record = CallRecord(
            session.plan.session_id,
            plan.model,
            plan.prompt_tokens,
            plan.output_tokens,
            self.now,
            service_class=session.plan.priority,
        )
        self.result.calls.append(record)
        call = _Call(session, plan, record, plan.prompt_tokens, plan.output_tokens)
        self._calls[id(call)] = call
        if self.intents is not None:
            self.intents.arrived(session.plan.session_id, self.now)
        self._try(call)

    def _request(self, call: _Call) -> PlacementRequest:
        model = call.plan.model
        return PlacementRequest(
            model=model,
            tokens=call.prompt + math.ceil(call.remaining),
            prompt_tokens=call.prompt,
            tenant=call.session.plan.tenant,
            priority=call.session.plan.priority,
            exclude_nodes=frozenset(call.exclude_nodes),
            exclude_spot_zones=frozenset(call.avoid_spot_zones),
            previous_replica=call.session.previous_replica,
            max_replicas=self._max_replicas[model],
            traffic_prompt_tokens=self.traffic.prompt_tokens(model, self.now) if self.traffic is not None else 0,
        )

    def _try(self, call: _Call) -> bool:
        """Ask for a lease as the pool service's acquire does; True when granted."""
        model, key, priority = call.plan.model, call.key, _priority(call)
        ahead = self.queue.ahead_of(key, model, priority, self.now)
        decision = self._timed(lambda: self.policy.place(self.fleet, self._request(call)))
        if decision.outcome == "never":
            self.queue.leave(key)
            self._waiting.get(model, {}).pop(key, None)
            self._fail(call.session, decision.reason or "no node can ever serve it")
            return False
        if (
            decision.outcome == "placed"
            and may_go(self.fleet, decision, ahead)
            and not defers_to_a_busy_replica(self.fleet, decision)
        ):
            self._grant(call, decision)
            return True
        self.queue.refresh(key, model, priority, call.session.plan.priority != "low_priority", self.now)
        self._waiting.setdefault(model, {})[key] = call
        call.record.waited_for_gpu = True
        if call.waiting_since is None:
            call.waiting_since = self.now
        if call.slot_wait_since is None and not load_in_flight(self.fleet, model):
            call.slot_wait_since = self.now
        return False

    def _grant(self, call: _Call, decision: Decision) -> None:
        assert decision.chosen is not None
        if self.traffic is not None:  # as the live pool books them: at the grant
            self.traffic.asked(call.plan.model, self.now, call.prompt)
            if (judged := judge(decision, self.fleet, self.config, self._slot_wait(call))) is not None:
                self.traffic.granted(
                    call.plan.model, self.now, judged.met, judged.fixable, judged.target, call.session.plan.priority
                )
        booking = self.fleet.apply(decision, call.prompt + math.ceil(call.remaining))
        self.queue.leave(call.key)
        self._waiting.get(call.plan.model, {}).pop(call.key, None)
        call.waiting_since = call.slot_wait_since = None
        call.booking = booking
        call.suspect = Suspect()  # the suspect-node rules count per lease, as the workflow's generate phase does
        if call.record.granted_s is None:
            call.record.granted_s = self.now
        replica = self.fleet.replicas[booking.replica_id]
        self.idle_since.pop(replica.id, None)
        if booking.created_replica:
            self._start_load(replica.id, decision.chosen.candidate.tier)
        rep = self._replicas[replica.id]
        if rep.record.first_lease_s is None:
            rep.record.first_lease_s = self.now
        if self.intents is not None:
            self.intents.leased(replica.id, self.now)
        if not call.record.tier:
            call.record.tier = decision.chosen.candidate.tier
        if replica.state == "loading":
            call.record.waited_for_load = True
            self._replicas[replica.id].waiting.append(call)
        else:
            self._serve(call)

    def _slot_wait(self, call: _Call) -> float:
        return 0.0 if call.slot_wait_since is None else self.now - call.slot_wait_since

    def _serve(self, call: _Call) -> None:
        assert call.booking is not None
        replica = self.fleet.replicas[call.booking.replica_id]
        rep = self._replicas[replica.id]
        cached = call.session.previous_replica == replica.id
        call.record.cold_start |= rep.record.ready_s is not None and rep.record.ready_s > call.record.issued_s
        prefill = call.prompt * (1 - self.config.prefix_cacheable_fraction) if cached else call.prompt
        call.first_token_s = self.now + prefill * self._contention(replica.id) / (
            replica.tokens_per_s * self.config.prefill_speedup
        )
        call.decoded_at = call.first_token_s
        call.written = 0.0
        if call.record.first_token_s is None:
            call.record.served_s = self.now
            call.record.first_token_s = call.first_token_s
        if rep.serving == 0:
            rep.busy_since = self.now
        rep.serving += 1
        self._serving.setdefault(replica.id, set()).add(id(call))
        self._rebatch(replica.id)
        if rep.serving == 1:
            self._rebatch_neighbours(replica.id)  # they share its GPUs with one more busy replica now
        if replica.node_id in self._stalled:
            self._watch(call)  # served by a wedged engine: it is silent from the start

    def _rebatch(self, replica_id: str) -> None:
        """The replica's batch changed: every call on it is brought up to date at its old rate, and finishes
        at the new one."""
        serving = self._serving.get(replica_id)
        replica = self.fleet.replicas.get(replica_id)
        if not serving or replica is None:
            return
        rate = sequence_rate(
            replica.tokens_per_s, replica.concurrency, len(serving), self.settings.single_stream_gain
        ) / self._contention(replica_id)
        if replica.node_id in self._stalled:
            rate = 0.0  # a wedged engine writes nothing until its stall ends
        for call_id in sorted(serving):
            call = self._calls[call_id]
            self._advance(call)
            call.rate = rate
            call.generation += 1
            if rate > 0:
                self._at(max(self.now, call.first_token_s) + call.remaining / rate, self._finish, call, call.generation)

    def _contention(self, replica_id: str) -> int:
        """How many replicas share the busiest of its GPUs while generating, itself counted: decode reads each
        replica's weights through the same memory, so two busy replicas on one GPU each get half of it."""
        busiest = 1
        for device in self._devices_of.get(replica_id, ()):
            busy = sum(
                1 for other in self._on_device[device] if other == replica_id or self._replicas[other].serving > 0
            )
            busiest = max(busiest, busy)
        return busiest

    def _rebatch_neighbours(self, replica_id: str) -> None:
        """A replica began or stopped generating: those generating on its GPUs change speed."""
        neighbours = {other for device in self._devices_of.get(replica_id, ()) for other in self._on_device[device]}
        for other in sorted(neighbours - {replica_id}):
            if self._replicas[other].serving > 0:
                self._rebatch(other)

    def _advance(self, call: _Call) -> None:
        """Count the tokens the call wrote since `decoded_at` (none before its first token)."""
        if self.now > call.decoded_at:
            done = min((self.now - call.decoded_at) * call.rate, call.remaining)
            call.remaining -= done
            call.written += done
            call.decoded_at = self.now

    def _finish(self, call: _Call, generation: int) -> None:
        if generation != call.generation:
            return  # this generation was cut; its continuation finishes instead
        self._advance(call)
        replica_id = self._release(call)
        call.record.done_s = self.now
        if self.traffic is not None and call.record.served_s is not None:
            self.traffic.held(call.plan.model, self.now, self.now - call.record.served_s)
        session = call.session
        session.tokens_so_far += call.prompt + round(call.written + call.remaining)
        session.previous_replica = replica_id
        del self._calls[id(call)]
        self._retry(call.plan.model)
        self._announce(session, call.plan, replica_id)
        if call.plan.spawn is not None:
            self._arrive(call.plan.spawn, session)  # the parent waits for it, as for a tool
        else:
            self._after_tools(session)

    def _announce(self, session: _Session, done: CallPlan, replica_id: str) -> None:
        """What the live workflow tells the pool on releasing the lease: what its next step waits for."""
        if self.intents is None or session.plan.priority == "low_priority":
            return
        if done.spawn is not None:
            self.intents.announce(done.spawn.session_id, done.spawn.calls[0].model, "spawn", self.now)
        elif session.index + 1 < len(session.plan.calls):
            kind: IntentKind = "awaiting_input" if done.ends_turn else "tool_calls"
            self.intents.announce(
                session.plan.session_id, session.plan.calls[session.index + 1].model, kind, self.now, replica_id
            )

    def _after_tools(self, session: _Session) -> None:
        done = session.plan.calls[session.index]
        following = session.plan.calls[session.index + 1] if session.index + 1 < len(session.plan.calls) else None
        at = self.now + done.tool_s
        if following is not None:
            at = max(at, following.not_before_s)
        self._at(at, self._next_call, session)

    def _next_call(self, session: _Session) -> None:
        session.index += 1
        if session.index < len(session.plan.calls):
            self._issue(session)
        else:
            self._end(session)

    def _end(self, session: _Session) -> None:
        session.record.ended_s = self.now
        self._open_sessions -= 1
        if session.parent is not None:
            self._after_tools(session.parent)

    def _fail(self, session: _Session, reason: str) -> None:
        session.record.failed = reason
        self._end(session)

    def _release(self, call: _Call) -> str:
        """End the call's lease; the replica it held (its busy time and idle clock kept)."""
        assert call.booking is not None
        replica_id = call.booking.replica_id
        rep = self._replicas[replica_id]
        if id(call) in self._serving.get(replica_id, set()):
            self._serving[replica_id].discard(id(call))
            rep.serving -= 1
            if rep.serving == 0:
                self._close_busy(rep, self.now)
                self._rebatch_neighbours(replica_id)
            self._rebatch(replica_id)
        self.fleet.release(call.booking)
        call.booking = None
        replica = self.fleet.replicas.get(replica_id)
        if replica is None:  # a replica started for this call alone, given up before it loaded
            rep.record.ended_s = self.now
            self.idle_since.pop(replica_id, None)
            self._leave_devices(replica_id)
        elif replica.active_leases == 0:
            self.idle_since[replica_id] = self.now
        return replica_id

    def _retry(self, model: str) -> None:
        """Waiting steps of `model` ask again, first in line first, until one is not placed."""
        waiting = self._waiting.get(model)
        if not waiting:
            return
        # The queue's own order: priority, then how long it has waited.
        for call in sorted(waiting.values(), key=lambda c: (-_priority(c), c.waiting_since or 0.0, c.key)):
            if call.key in waiting and not self._try(call):
                break

    # --- replicas ------------------------------------------------------------------------------

    def _start_load(self, replica_id: str, tier: str, preloaded: bool = False) -> None:
        replica = self.fleet.replicas[replica_id]
        node = self.fleet.nodes[replica.node_id]
        load_s = 0.0 if preloaded else load_seconds(self.fleet, replica.model, node, tier, self.config)
        share = node.usd_per_hour * len(replica.devices) / max(len(node.devices), 1)
        record = ReplicaRecord(
            replica_id,
            replica.model,
            node.id,
            len(replica.devices),
            share,
            "preloaded" if preloaded else tier,
            self.now,
            preloaded=preloaded,
            devices=replica.devices,
        )
        self.result.replicas.append(record)
        self._devices_of[replica_id] = [(node.id, index) for index in replica.devices]
        for device in self._devices_of[replica_id]:
            self._on_device.setdefault(device, set()).add(replica_id)
        self._replicas[replica_id] = _Replica(record)
        if preloaded:
            self._ready(replica_id)
        else:
            self._at(self.now + load_s, self._ready, replica_id)

    def _ready(self, replica_id: str) -> None:
        replica = self.fleet.replicas.get(replica_id)
        if replica is None or replica.state != "loading":
            return  # lost with its node while it loaded
        self.fleet.mark_warm(replica_id)
        rep = self._replicas[replica_id]
        rep.record.ready_s = self.now
        self._cache(replica.node_id, replica.model)
        if replica.active_leases == 0:
            self.idle_since[replica_id] = self.now
        waiting, rep.waiting = rep.waiting, []
        for call in waiting:
            self._serve(call)
        self._retry(replica.model)

    def _unload(self, replica_id: str) -> None:
        rep = self._replicas[replica_id]
        rep.record.ended_s = self.now
        self._close_busy(rep, self.now)
        self.fleet.unload(replica_id)
        self.idle_since.pop(replica_id, None)
        self._leave_devices(replica_id)
        if self.intents is not None:
            self.intents.ended(replica_id, self.now)

    def _leave_devices(self, replica_id: str) -> None:
        for device in self._devices_of.pop(replica_id, ()):
            self._on_device[device].discard(replica_id)

    def _close_busy(self, rep: _Replica, at: float) -> None:
        if rep.busy_since is not None:
            rep.record.busy_s += at - rep.busy_since
            rep.busy_since = None if rep.serving == 0 else at

    def _cache(self, node_id: str, model: str) -> None:
        """Weights land on the node's disk; the least recently used ones no replica there needs go past its size."""
        disk = self._disk[node_id]
        disk[model] = self.fleet.models[model].weights_gib
        disk.move_to_end(model)
        self.fleet.cache_weights(node_id, model)
        in_use = {r.model for r in self.fleet.replicas.values() if r.node_id == node_id}
        for old in list(disk):
            if sum(disk.values()) <= self.disk_gib[node_id]:
                break
            if old not in in_use:
                del disk[old]
                self.fleet.evict_weights(node_id, old)

    def _preload(self) -> None:
        for model, count in sorted(self.policy.preload.items()):
            for _ in range(count):
                decision = self.policy.new_replica(self.fleet, model, None)
                if decision.chosen is None:
                    break
                self._start_replica(decision, preloaded=True)

    def _start_replica(self, decision: Decision, preloaded: bool = False, prewarm: ScaleUp | None = None) -> None:
        """A replica for the scaler: placed and loading, with no lease on it yet (as the pool's start_replica)."""
        assert decision.chosen is not None
        booking = self.fleet.apply(decision, 1)
        self.fleet.set_load(booking.replica_id, outstanding_tokens=0, active_leases=0)
        self._start_load(booking.replica_id, decision.chosen.candidate.tier, preloaded)
        self.idle_since[booking.replica_id] = self.now
        if prewarm is not None:
            self._replicas[booking.replica_id].record.prewarm = True
            if self.intents is not None:
                self.intents.started(booking.replica_id, prewarm.model, self.now, prewarm.reason)

    # --- the scaler ----------------------------------------------------------------------------

    def _tick(self) -> None:
        for model, waiting in self._waiting.items():  # every waiter asks again each tick: it stays in line
            for call in waiting.values():
                self.queue.refresh(
                    call.key, model, _priority(call), call.session.plan.priority != "low_priority", self.now
                )
        demand = {m: ModelDemand(waiting=n) for m, n in self.queue.demand(self.now).items()}
        started = time.perf_counter()
        plan = self.policy.plan(self.fleet, self.idle_since, self.now, demand)
        self.result.decision_seconds += time.perf_counter() - started
        for action in plan:
            if isinstance(action, ScaleDown):
                replica = self.fleet.replicas.get(action.replica_id)
                if replica is not None and replica.state == "warm" and replica.active_leases == 0:
                    self._unload(action.replica_id)
            else:
                prompt = (
                    self.traffic.prompt_tokens(action.model, self.now)
                    if self.traffic is not None and self.traffic.serves_interactive(action.model, self.now)
                    else None
                )
                decision = self._timed(functools.partial(self.policy.new_replica, self.fleet, action.model, prompt))
                if decision.chosen is not None:
                    self._start_replica(decision, prewarm=action if action.prewarm else None)
        for model in sorted(self._waiting):
            self._retry(model)
        counts: dict[str, int] = {}
        for replica in self.fleet.replicas.values():
            counts[replica.model] = counts.get(replica.model, 0) + 1
        self.result.replica_samples.append((self.now, counts))
        if self._open_sessions or self._arrivals_left:
            self._at(self.now + self.settings.tick_s, self._tick)

    # --- preemptions ---------------------------------------------------------------------------

    def _notice(self, node_id: str, notice_s: float) -> None:
        """A spot reclaim: with notice the node drains and its generations move now, keeping their tokens."""
        node = self.fleet.nodes[node_id]
        if not node.healthy:
            return  # already reclaimed and not back yet
        record = PreemptionRecord(node_id, self.now, notice_s, 0, 0, 0)
        self.result.preemptions.append(record)
        if notice_s > 0:
            self.fleet.set_draining(node_id, True)
            self._cut_node(node_id, record, lost_unseen=False)
            self._at(self.now + notice_s, self._reclaim, node_id, record)
        else:
            self._reclaim(node_id, record)

    def _reclaim(self, node_id: str, record: PreemptionRecord) -> None:
        self._cut_node(node_id, record, lost_unseen=record.notice_s == 0)
        for replica in [r for r in self.fleet.replicas.values() if r.node_id == node_id]:
            self._unload(replica.id)
        self.fleet.set_draining(node_id, False)
        self.fleet.set_health(node_id, False)
        for model in list(self._disk[node_id]):  # a reclaimed spot machine comes back as a new, empty one
            self.fleet.evict_weights(node_id, model)
        self._disk[node_id].clear()
        self._at(self.now + self.settings.spot_return_s, self._node_back, node_id)
        for model in sorted(self._waiting):
            self._retry(model)

    def _node_back(self, node_id: str) -> None:
        self.fleet.set_health(node_id, True)
        for model in sorted(self._waiting):
            self._retry(model)

    def _cut_node(self, node_id: str, record: PreemptionRecord, lost_unseen: bool) -> None:
        """Every call leased on the node's replicas is placed again elsewhere: one still waiting for a load
        loses nothing; one generating keeps what it wrote, less what no heartbeat reported when it was killed."""
        cut = [
            c
            for c in self._calls.values()
            if c.booking is not None and self.fleet.replicas[c.booking.replica_id].node_id == node_id
        ]
        zone = self.fleet.nodes[node_id].zone
        for call in sorted(cut, key=lambda c: c.key):
            assert call.booking is not None  # cut holds leased calls, and each is released only in its turn
            rep = self._replicas[call.booking.replica_id]
            generating = id(call) in self._serving.get(rep.record.replica_id, set())
            written = 0
            if generating:
                self._advance(call)
                written = min(int(call.written), math.ceil(call.remaining + call.written) - 1)
            lost = min(written, math.ceil(call.rate * self.settings.heartbeat_s)) if lost_unseen else 0
            if call in rep.waiting:
                rep.waiting.remove(call)
            record.calls_cut += 1
            record.tokens_lost += lost
            if generating:  # a call still waiting for its load just waits elsewhere, with or without checkpoints
                record.tokens_lost_restart += call.session.tokens_so_far + call.prompt + written
            call.generation += 1
            self._release(call)
            kept = written - lost
            call.prompt += kept
            call.remaining = math.ceil(call.remaining + call.written) - kept
            call.written = 0.0
            call.record.interruptions += 1
            # The very rules the workflow applies (sdk/wire/recovery.py): a reclaim with notice, or a lost node.
            avoid = avoid_after(
                call.session.plan.recovery,
                Cut("lost" if lost_unseen else "notice", node_id, zone, self.fleet.nodes[node_id].capacity),
            )
            call.exclude_nodes |= avoid.nodes
            call.avoid_spot_zones |= avoid.spot_zones
            call.session.previous_replica = None
            self._try(call)

    # --- stalls: engines that go quiet on a live node ----------------------------------------------

    def _stall(self, node_id: str, seconds: float) -> None:
        """The node's engines go quiet for `seconds` (wedged, not dead): its generations stop writing and beating
        while its agent still answers, so the pool's evidence says the node is alive."""
        if not self.fleet.nodes[node_id].healthy:
            return  # reclaimed: nothing runs there to stall
        record = StallRecord(node_id, self.now, seconds)
        self.result.stalls.append(record)
        until = max(self.now + seconds, self._stalled[node_id][0] if node_id in self._stalled else 0.0)
        self._stalled[node_id] = (until, record)
        for replica_id in self._replicas_on(node_id):
            self._rebatch(replica_id)
            for call_id in sorted(self._serving.get(replica_id, set())):
                record.calls_quiet += 1
                self._watch(self._calls[call_id])
        self._at(until, self._stall_over, node_id)

    def _stall_over(self, node_id: str) -> None:
        if node_id not in self._stalled or self._stalled[node_id][0] > self.now:
            return  # a later stall goes on
        del self._stalled[node_id]
        for replica_id in self._replicas_on(node_id):
            self._rebatch(replica_id)  # its generations write again, from where their text stood

    def _replicas_on(self, node_id: str) -> list[str]:
        return sorted(r.id for r in self.fleet.replicas.values() if r.node_id == node_id)

    def _watch(self, call: _Call) -> None:
        """The workflow looks at a silent generation one heartbeat timeout after its last beat."""
        call.watch += 1
        self._at(self.now + self.settings.heartbeat_timeout_s, self._silent, call, call.watch)

    def _silent(self, call: _Call, watch: int) -> None:
        """A generation silent for a heartbeat timeout: the suspect-node rules weigh it against the evidence
        about its node, as the workflow does (workflows/fleet_recovery.py `weigh`)."""
        if watch != call.watch or call.booking is None:
            return  # looked at again since, or no longer on a lease
        replica = self.fleet.replicas[call.booking.replica_id]
        if replica.node_id not in self._stalled or id(call) not in self._serving.get(replica.id, set()):
            return  # it beat again in time, or it is not generating
        _, record = self._stalled[replica.node_id]
        liveness: Liveness = "alive" if self.fleet.nodes[replica.node_id].healthy else "gone"
        verdict = call.suspect.verdict("heartbeat", liveness)
        call.suspect = call.suspect.after(verdict, liveness)
        if verdict == "continue_quiet":
            record.continued += 1
            call.record.quiet_continues += 1
            self._watch(call)  # continued on its lease: quiet again while the engine stays wedged
            return
        record.calls_moved += 1
        self._leave_quiet_node(call, replica.node_id, "stalled" if verdict == "stalled" else "lost")

    def _leave_quiet_node(self, call: _Call, node_id: str, kind: Literal["stalled", "lost"]) -> None:
        """A quiet generation given up on its node: placed again where the recovery rules allow, keeping all it
        wrote (its heartbeats carried that text; the wedged engine wrote nothing since)."""
        self._advance(call)
        total = math.ceil(call.remaining + call.written)
        written = min(int(call.written), total - 1)
        call.generation += 1
        self._release(call)
        call.prompt += written
        call.remaining = total - written
        call.written = 0.0
        call.record.interruptions += 1
        node = self.fleet.nodes[node_id]
        avoid = avoid_after(call.session.plan.recovery, Cut(kind, node_id, node.zone, node.capacity))
        call.exclude_nodes |= avoid.nodes
        call.avoid_spot_zones |= avoid.spot_zones
        self._try(call)


def _priority(call: _Call) -> int:
    return {"interactive": 2, "batch": 1}.get(call.session.plan.priority, 0)
