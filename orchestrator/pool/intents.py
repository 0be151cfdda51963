"""What the pool hears is coming: steps announced before they ask for a lease, and the pre-warms they cause.

A task whose step ends in tool calls will ask for the same model again once its tools return; a step that
spawns sub-agents will see them ask for theirs; a step that asks a human will be back when the human
answers. The step says so when it releases its lease (no extra round trip), and the scaler starts or
keeps a replica so that the next step finds it warm (scaler.py). How soon each kind comes back is learned
per model from the announcements that came true, so a model whose tools take a minute is not pre-warmed
for a step due in two seconds.

Pre-warming spends GPU time on a guess, so each model has an allowance (its policy's
`intent_gpu_hours_per_hour`): the GPU-hours its pre-warms sat idle before their first lease over the
last hour may not pass it. Keeping a warm replica for an announced step is not charged: it is what the
keep-alive does anyway, a few minutes longer. Low-priority work never announces anything: it is the
work that waits for spare capacity.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from statistics import median
from typing import Literal

IntentKind = Literal["tool_calls", "spawn", "awaiting_input", "submitted"]
# Until a model has delays of its own: a tool call of the scenarios' median (2 s) plus the step's own
# bookkeeping; a sub-agent's first step after its workflow starts; a human's answer (a guess worth
# replacing: the learned median takes over after DELAY_SAMPLES_MIN announcements).
DEFAULT_DELAY_S: dict[str, float] = {"tool_calls": 5.0, "spawn": 2.0, "awaiting_input": 60.0, "submitted": 1.0}
DELAY_SAMPLES = 64
DELAY_SAMPLES_MIN = 5
# An announcement not come true this long after it was due (or 4× its delay, when that is longer) is
# dropped: the task ended, failed or was cancelled, and no step follows.
EXPIRY_S = 120.0
ALLOWANCE_WINDOW_S = 3600.0
RECENT_PREWARMS = 50  # what `berth models show` and the Models page list
SPAWN_KEY = "#spawn-"  # no task id holds it: TASK_ID_PATTERN (sdk/wire/limits.py) has no '#'


@dataclass(frozen=True)
class Intent:
    task_id: str
    model: str
    kind: IntentKind
    at: float  # when it was announced
    due: float  # when the step is expected to ask
    replica_id: str | None = None  # the replica holding the task's prefix, if it has one

    def expires(self) -> float:
        return self.due + max(EXPIRY_S, 4 * (self.due - self.at))


@dataclass
class Prewarm:
    """A replica started for announced steps, before any of them asked."""

    replica_id: str
    model: str
    started_at: float
    reason: str
    used_at: float | None = None  # its first lease
    ended_at: float | None = None  # unloaded (or lost) before or after use


@dataclass
class IntentBook:
    """The announcements still pending, the delays learned from those that came true, the pre-warms and the
    allowance each model has spent."""

    pending: dict[str, Intent] = field(default_factory=dict)  # task id → its announced next step
    delays: dict[tuple[str, str], deque[float]] = field(default_factory=dict)
    prewarms: dict[str, deque[Prewarm]] = field(default_factory=dict)
    _by_replica: dict[str, Prewarm] = field(default_factory=dict)
    _spent: dict[str, deque[tuple[float, float]]] = field(default_factory=dict)  # model → (at, GPU-s)

    def announce(self, task_id: str, model: str, kind: IntentKind, now: float, replica_id: str | None = None) -> Intent:
        intent = Intent(task_id, model, kind, now, now + self.expected_delay(model, kind), replica_id)
        self.pending[task_id] = intent
        return intent

    def announce_spawns(self, parent_id: str, model: str, count: int, now: float) -> None:
        """A step starts `count` sub-agents; their models are not known until they start, so the parent's is
        assumed (a coordinator's workers usually share its model), under keys their first asks match."""
        for i in range(count):
            self.announce(f"{parent_id}{SPAWN_KEY}{i}", model, "spawn", now)

    def arrived(self, task_id: str, now: float, parent_id: str | None = None) -> Intent | None:
        """The task asked for its lease: its announcement came true, and teaches the delay. A sub-agent's
        first ask (`parent_id` given) fulfils one of its parent's announced spawns."""
        intent = self.pending.pop(task_id, None)
        if intent is None and parent_id is not None:
            key = next((k for k in self.pending if k.startswith(f"{parent_id}{SPAWN_KEY}")), None)
            intent = self.pending.pop(key) if key is not None else None
        if intent is not None:
            samples = self.delays.setdefault((intent.model, intent.kind), deque(maxlen=DELAY_SAMPLES))
            samples.append(now - intent.at)
        return intent

    def expected_delay(self, model: str, kind: IntentKind) -> float:
        samples = self.delays.get((model, kind))
        if samples is None or len(samples) < DELAY_SAMPLES_MIN:
            return DEFAULT_DELAY_S[kind]
        return median(samples)

    def due(self, now: float) -> dict[str, list[Intent]]:
        """Pending announcements by model, the expired ones dropped."""
        for task_id in [t for t, i in self.pending.items() if i.expires() < now]:
            del self.pending[task_id]
        by_model: dict[str, list[Intent]] = {}
        for intent in self.pending.values():
            by_model.setdefault(intent.model, []).append(intent)
        return by_model

    # --- pre-warms and the allowance ------------------------------------------------------

    def started(self, replica_id: str, model: str, now: float, reason: str) -> None:
        prewarm = Prewarm(replica_id, model, now, reason)
        self.prewarms.setdefault(model, deque(maxlen=RECENT_PREWARMS)).append(prewarm)
        self._by_replica[replica_id] = prewarm

    def leased(self, replica_id: str, now: float) -> None:
        """A lease landed on the replica: a pre-warm it was is used, and no longer spends the allowance."""
        prewarm = self._by_replica.pop(replica_id, None)
        if prewarm is not None:
            prewarm.used_at = now

    def ended(self, replica_id: str, now: float) -> None:
        prewarm = self._by_replica.pop(replica_id, None)
        if prewarm is not None:
            prewarm.ended_at = now

    def unused(self, model: str) -> list[str]:
        """Replicas of the model pre-warmed and not leased yet."""
        return [p.replica_id for p in self.prewarms.get(model, ()) if p.replica_id in self._by_replica]

    def spend(self, model: str, gpu_s: float, now: float) -> None:
        """GPU-seconds the model's unused pre-warms sat idle since the last tick."""
        if gpu_s > 0:
            self._spent.setdefault(model, deque()).append((now, gpu_s))

    def spent_gpu_hours(self, model: str, now: float) -> float:
        spent = self._spent.get(model)
        if not spent:
            return 0.0
        while spent and spent[0][0] < now - ALLOWANCE_WINDOW_S:
            spent.popleft()
        return sum(gpu_s for _, gpu_s in spent) / 3600

    def within_allowance(self, model: str, allowance_gpu_hours: float, now: float) -> bool:
        return allowance_gpu_hours > 0 and self.spent_gpu_hours(model, now) < allowance_gpu_hours
