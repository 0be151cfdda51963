"""Scorer weights and the physical constants the scorers need, in one frozen config.

Every scorer returns a raw value in its own unit (seconds, dollars, a fraction); the weight
turns it into seconds of expected time-to-first-token, so the terms add up and a Decision can
say which one decided. Operators tune these through config; the defaults are derived below.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace

from ..weights_transfer import DATACENTER_BYTES_PER_S, ENGINE_START_S, GIB, ORIGIN_BYTES_PER_S


@dataclass(frozen=True)
class ScorerWeights:
    """Seconds of TTFT that one unit of each scorer's raw value is worth."""

    ttft: float = 1.0  # already in seconds
    generation: float = 1.0  # already in seconds: the step's own prefill and answer on that GPU
    # $1 of GPU time is worth a minute of waiting: a new replica on one H100 ($2.5/h) held for
    # its load and idle window (~6 min) costs ~$0.25 ≈ 15 s, so a 3× cheaper node wins ~10 s
    # among new replicas, yet never outweighs a ~30 s cold start against a warm replica.
    cost: float = 60.0
    # One whole large GPU stranded (raw 1.0) costs about a future 8B cold start from disk:
    # 16 GiB / 2 GiB/s + 20 s engine start ≈ 28 s, rounded down to 20 s since it may never be needed.
    fragmentation: float = 20.0
    affinity: float = 1.0  # raw value is already the prefill seconds saved (negative)
    # Wrong capacity class: a preempted interactive step waits for a cold start elsewhere,
    # ~30 s for an 8B model from disk (16 GiB / 2 GiB/s + 20 s); batch work placed on new
    # on-demand capacity wastes about as much spot price, so the same 30 s either way.
    capacity_class: float = 30.0
    # A call predicted to miss its latency objectives (sdk/wire/objectives.py) on a candidate: 1,000 s, more
    # than every other term can differ by, so a candidate predicted to meet them wins whenever one exists;
    # among those that all meet (or all miss) the other terms decide. Raw: misses (serving_speed.py).
    objective: float = 1000.0


@dataclass(frozen=True)
class PlacementConfig:
    weights: ScorerWeights = field(default_factory=ScorerWeights)
    # Load-time figures shared with the simulated replicas (orchestrator/weights_transfer.py).
    engine_start_s: float = ENGINE_START_S
    intra_dc_gib_per_s: float = DATACENTER_BYTES_PER_S / GIB
    wan_gib_per_s: float = ORIGIN_BYTES_PER_S / GIB
    # A spot node without its own measured risk: ~15% chance that work on it is reclaimed and
    # redone (public spot interruption rates of 5–20% per day of instance life, work-weighted).
    spot_preemption_risk: float = 0.15
    # Coding-agent traces show ~86% of a step's prompt tokens are the previous step's prefix.
    prefix_cacheable_fraction: float = 0.86
    # Prefill runs ~4× faster per token than decode on the same GPU (compute- vs memory-bound).
    prefill_speedup: float = 4.0
    # Affinity is dropped once the previous replica's batch needs longer than this to drain: that
    # many outstanding tokens fill its KV cache, which has likely evicted the task's prefix.
    affinity_max_queue_s: float = 10.0
    # A new replica holds its GPUs at least this long after its last lease (the scale-to-zero
    # idle window, 5 minutes by default), so its cost counts that hold too. This is what makes a
    # burst join the replica already loading instead of starting one replica per request.
    replica_min_hold_s: float = 300.0
    # New-replica candidates kept per shelf (locality tier, capacity class, GPU type), the fits that strand
    # least first, for shelves whose floor can still beat the best found: 2 per shelf found the full scan's
    # best in 100 of 100 sampled decisions (benchmarks/placement_latency.py) and in 21,914 of the placement
    # property's random fleets; replicas are read by class (spare.py).
    candidates_per_tier: int = 2


DEFAULT_CONFIG = PlacementConfig()


def tuned(overrides: Mapping[str, float], base: PlacementConfig = DEFAULT_CONFIG) -> PlacementConfig:
    """`base` with an operator's values (BerthConfig.placement_overrides): a field's name, or `weights.<name>`
    for a scorer's weight. An unknown name is refused by name, never ignored."""
    weights = {k.removeprefix("weights."): v for k, v in overrides.items() if k.startswith("weights.")}
    rest = {k: v for k, v in overrides.items() if not k.startswith("weights.") and k != "candidates_per_tier"}
    known = {f"weights.{f.name}" for f in fields(ScorerWeights)} | {f.name for f in fields(PlacementConfig)} - {
        "weights"
    }
    unknown = set(overrides) - known
    if unknown:
        raise ValueError(f"placement: no setting named {', '.join(sorted(unknown))}")
    per_tier = _count("candidates_per_tier", overrides.get("candidates_per_tier", base.candidates_per_tier))
    return replace(base, weights=replace(base.weights, **weights), candidates_per_tier=per_tier, **rest)


def _count(name: str, value: float) -> int:
    """A count setting takes a whole number only: 2.5 candidates per shelf would never close a shelf."""
    if not float(value).is_integer():
        raise ValueError(f"placement: {name} must be a whole number, not {value}")
    return int(value)
