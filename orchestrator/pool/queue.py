"""The acquire wait queue: who waits for which model, in what order.

A step the pool cannot place now waits and asks again; while it does, it holds a place in
this queue, ordered by priority (higher first) then by when it started waiting. A step that
arrives while others wait for the same model queues behind them unless more slots are free
than steps wait ahead of it (the pool service counts them), so a burst of newcomers never
starves a step that has waited for minutes, and a free slot never idles while the first in
line sleeps between two asks.
A waiter that stops asking (its task was cancelled, its worker died) drops out after
`stale_after_s`, so a vanished waiter never blocks the queue.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Waiter:
    key: str  # the task id: one step of a task waits at a time
    model: str
    priority: int
    since: float
    seen: float
    # Whether a replica the scaler starts could serve it: low_priority waiters never start one, and an isolated or
    # dedicated tenant's cannot use one placed for no tenant, so neither is demand for one.
    may_scale_up: bool

    @property
    def order(self) -> tuple[int, float, str]:
        return (-self.priority, self.since, self.key)


class WaitQueue:
    def __init__(self, stale_after_s: float = 10.0) -> None:
        self.stale_after_s = stale_after_s
        self._waiters: dict[str, Waiter] = {}

    def refresh(self, key: str, model: str, priority: int, may_scale_up: bool, now: float) -> Waiter:
        """Join the queue, or say "still here" keeping the original place."""
        waiter = self._waiters.get(key)
        if waiter is None or waiter.model != model:
            waiter = Waiter(key, model, priority, now, now, may_scale_up)
            self._waiters[key] = waiter
        waiter.seen = now
        waiter.may_scale_up = may_scale_up  # the tenant's trust may have changed while it waited
        return waiter

    def leave(self, key: str) -> Waiter | None:
        """Leave the queue; the waiter that left, if `key` was waiting (its `since` says for how long)."""
        return self._waiters.pop(key, None)

    def depth(self, now: float) -> dict[str, tuple[int, float]]:
        """Live waiters per model, whatever their priority, and how long the longest of them has waited."""
        self._expire(now)
        found: dict[str, tuple[int, float]] = {}
        for w in self._waiters.values():
            count, longest = found.get(w.model, (0, 0.0))
            found[w.model] = (count + 1, max(longest, now - w.since))
        return found

    def ahead_of(self, key: str, model: str, priority: int, now: float) -> int:
        """How many live waiters for `model` go before `key` (a newcomer counts as arriving now)."""
        self._expire(now)
        me = self._waiters.get(key)
        mine = me.order if me is not None and me.model == model else (-priority, now, key)
        return sum(1 for w in self._waiters.values() if w.model == model and w.key != key and w.order < mine)

    def demand(self, now: float) -> dict[str, int]:
        """Live waiters per model that may cause a scale-up (the scaler's input)."""
        self._expire(now)
        counts: dict[str, int] = {}
        for w in self._waiters.values():
            if w.may_scale_up:
                counts[w.model] = counts.get(w.model, 0) + 1
        return counts

    def __len__(self) -> int:
        return len(self._waiters)

    def __contains__(self, key: object) -> bool:
        return key in self._waiters

    def _expire(self, now: float) -> None:
        for key in [k for k, w in self._waiters.items() if now - w.seen > self.stale_after_s]:
            del self._waiters[key]
