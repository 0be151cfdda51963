"""What each model's recent calls looked like: their prompts, how long they held a slot, and whether placement
predicted them to meet their latency objectives. The scaler sizes a model by it and placement judges a new
replica by it; the live pool and `berth simulate` feed it the same way (at each ask, grant and release).

Bounded: a model keeps its last `MAX_SAMPLES` samples of each kind within `window_s`, so a burst of a million
calls costs the same memory as a quiet hour.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

MAX_SAMPLES = 2048
PROMPT_PERCENTILE = 0.95  # a new replica is judged by the prompt 95% of the model's calls stay within
# Before a model's first call has been seen, its replica is judged by a 4k-token prompt: a first replica placed for
# one short prompt would serve the long ones that follow on a GPU too slow for them (a 500-token first call put
# an 8B on an L40S), while 8k made every packed 8B look unfit beside a co-resident and cost the standard
# scenarios a third more GPU-hours (steady 0.59 → 0.79× k8s-spread's).
UNSEEN_PROMPT_TOKENS = 4096


@dataclass
class _ModelTraffic:
    prompts: deque[tuple[float, int]] = field(default_factory=lambda: deque(maxlen=MAX_SAMPLES))
    holds: deque[tuple[float, float]] = field(default_factory=lambda: deque(maxlen=MAX_SAMPLES))
    # (when, met, fixable, target, service class): whether the grant was predicted to meet its objectives, and whether a miss was
    # the wait's doing (more capacity would have met it) rather than the call's own prefill or answer.
    grants: deque[tuple[float, bool, bool, float, str]] = field(default_factory=lambda: deque(maxlen=MAX_SAMPLES))
    # The prompt percentile, as of `asks` asks, good until its oldest sample leaves the window: placement reads it at
    # every ask, and sorting 2,048 samples each time was 4% of the worker's CPU under a burst.
    asks: int = 0
    prompt_percentile: tuple[int, float, int] | None = None  # (asks, valid until, tokens)


@dataclass(frozen=True)
class Attainment:
    calls: int  # granted within the window with per-call objectives
    met: int  # of those, predicted to meet them
    fixable_misses: int  # misses that capacity would have turned into meets

    @property
    def share(self) -> float:
        return 1.0 if self.calls == 0 else self.met / self.calls

    def share_without_fixable(self) -> float:
        """The attainment more capacity could reach: every fixable miss met."""
        return 1.0 if self.calls == 0 else (self.met + self.fixable_misses) / self.calls


class TrafficBook:
    """Per model, the recent calls' samples (module docstring)."""

    def __init__(self, window_s: float = 300.0, attainment_window_s: float = 60.0) -> None:
        self.window_s = window_s
        self.attainment_window_s = attainment_window_s
        self._models: dict[str, _ModelTraffic] = {}
        self._capacity: dict[str, tuple[frozenset[str], float]] = {}  # model → (its warm replicas, since when)

    def _of(self, model: str) -> _ModelTraffic:
        return self._models.setdefault(model, _ModelTraffic())

    def asked(self, model: str, now: float, prompt_tokens: int) -> None:
        traffic = self._of(model)
        traffic.prompts.append((now, max(prompt_tokens, 0)))
        traffic.asks += 1

    def granted(
        self, model: str, now: float, met: bool, fixable: bool, target: float, service_class: str = "interactive"
    ) -> None:
        """A grant with per-call objectives: predicted to meet them, or to miss them for its wait (`fixable`),
        under an attainment `target`, for a task of `service_class`."""
        self._of(model).grants.append((now, met, fixable and not met, target, service_class))

    def held(self, model: str, now: float, seconds: float) -> None:
        self._of(model).holds.append((now, max(seconds, 0.0)))

    def prompt_tokens(self, model: str, now: float) -> int:
        """The prompt size PROMPT_PERCENTILE of the model's recent calls stay within (UNSEEN_PROMPT_TOKENS with none
        yet)."""
        traffic = self._of(model)
        cached = traffic.prompt_percentile
        if cached is not None and cached[0] == traffic.asks and now <= cached[1]:
            return cached[2]
        in_window = [(at, p) for at, p in traffic.prompts if now - at <= self.window_s]
        recent = sorted(p for _, p in in_window)
        tokens = (
            recent[min(math.ceil(PROMPT_PERCENTILE * len(recent)) - 1, len(recent) - 1)]
            if recent
            else UNSEEN_PROMPT_TOKENS
        )
        # Until the oldest sample in the window leaves it, only a new ask changes the answer.
        valid_until = min(at for at, _ in in_window) + self.window_s if in_window else math.inf
        traffic.prompt_percentile = (traffic.asks, valid_until, tokens)
        return tokens

    def mean_hold_s(self, model: str, now: float) -> float | None:
        """How long the model's recent calls held their slot, on average; None with none yet."""
        recent = [s for at, s in self._of(model).holds if now - at <= self.window_s]
        return sum(recent) / len(recent) if recent else None

    def attainment(self, model: str, now: float, service_class: str | None = None) -> Attainment:
        """The model's recent grants' attainment, of one service class's tasks or (None) all of them."""
        recent = [
            (met, fixable)
            for _, met, fixable, _, cls in self._recent_grants(model, now)
            if service_class is None or cls == service_class
        ]
        return Attainment(len(recent), sum(met for met, _ in recent), sum(fixable for _, fixable in recent))

    def classes(self, model: str, now: float) -> dict[str, float]:
        """The service classes of the model's recent grants, each with its strictest attainment target."""
        targets: dict[str, float] = {}
        for *_, target, cls in self._recent_grants(model, now):
            targets[cls] = max(targets.get(cls, 0.0), target)
        return targets

    def target(self, model: str, now: float) -> float:
        """The strictest attainment target among the model's recent grants (1.0 with none: nothing to judge)."""
        return max((g[3] for g in self._recent_grants(model, now)), default=1.0)

    def serves_interactive(self, model: str, now: float) -> bool:
        """Whether recent calls of the model had per-call objectives: a replica added for it must meet them."""
        return any(True for _ in self._recent_grants(model, now))

    def serving(self, model: str, warm: frozenset[str], now: float) -> None:
        """The model's warm replicas as of `now`: when they change, its attainment is judged afresh, on grants
        made with that capacity only (a minute of misses from before a replica came up asked for it already)."""
        seen = self._capacity.get(model)
        if seen is None or seen[0] != warm:
            self._capacity[model] = (warm, now)

    def _recent_grants(self, model: str, now: float) -> list[tuple[float, bool, bool, float, str]]:
        since = self._capacity[model][1] if model in self._capacity else float("-inf")
        return [g for g in self._of(model).grants if now - g[0] <= self.attainment_window_s and g[0] >= since]
