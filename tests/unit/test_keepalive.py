"""The learned keep-alive: windows from a model's own idle gaps, pre-warms from their head, the ski-rental
fallback, and the scaler shedding the replica cheapest to bring back."""

from __future__ import annotations

import random

from orchestrator.pool import Device, FleetState, ModelSpec, Node
from orchestrator.pool.intents import IntentBook
from orchestrator.pool.keepalive import BIN_S, MIN_GAPS, PREWARM_MIN_S, SLICE_S, SLICES, IdleGaps
from orchestrator.pool.scaler import COLD_START_WAIT_GPUS, Foresight, ScaleDown, ScaleUp, plan_scaling
from sdk.wire.catalogue import ScalingPolicy

LOAD_S, HOLD = 23.0, 1.0
BREAK_EVEN = LOAD_S * (HOLD + COLD_START_WAIT_GPUS) / HOLD


def gaps_of(spans: list[float], start: float = 0.0, busy_s: float = 30.0) -> tuple[IdleGaps, float]:
    """A model busy `busy_s`, then idle for each span in turn; returns the gaps and the time after the last."""
    gaps, t = IdleGaps(), start
    for span in spans:
        gaps.observe("m", 1, t)
        t += busy_s
        gaps.observe("m", 0, t)
        t += span
    gaps.observe("m", 1, t)
    return gaps, t


def test_too_few_gaps_fall_back_to_keeping_until_the_holding_cost_one_cold_start() -> None:
    gaps, now = gaps_of([60.0] * (MIN_GAPS - 1))
    alive = gaps.keep_alive("m", 1, now, HOLD, LOAD_S, COLD_START_WAIT_GPUS)
    assert (alive.source, alive.window_s, alive.prewarm_s) == ("break-even", BREAK_EVEN, 0.0)


def test_short_gaps_keep_the_ski_rental_window_since_the_histogram_is_blind_past_its_longest() -> None:
    rng = random.Random(7)
    gaps, now = gaps_of([rng.uniform(5, 120) for _ in range(200)])
    alive = gaps.keep_alive("m", 1, now, HOLD, LOAD_S, COLD_START_WAIT_GPUS)
    assert (alive.source, alive.window_s, alive.prewarm_s) == ("break-even", BREAK_EVEN, 0.0)


def test_gaps_of_about_20_minutes_unload_at_once_and_prewarm_before_the_shortest() -> None:
    rng = random.Random(7)
    # Holding 20 minutes costs 1,200 GPU-s, over a 713 GPU-s cold start; a reload 18 minutes in costs 23.
    gaps, now = gaps_of([rng.uniform(1100, 1300) for _ in range(12)], busy_s=10)
    alive = gaps.keep_alive("m", 1, now, HOLD, LOAD_S, COLD_START_WAIT_GPUS)
    assert alive.source == "learned" and alive.gaps == 12
    assert PREWARM_MIN_S <= alive.prewarm_s <= 1100 < alive.window_s <= 1300 + BIN_S


def test_gaps_that_are_never_short_make_a_prewarm_at_their_head() -> None:
    rng = random.Random(3)
    # A job-like model idle 40–50 min between uses: unloaded at once, loaded again at the head (40 min).
    gaps, now = gaps_of([rng.uniform(2400, 3000) for _ in range(20)], busy_s=5)
    alive = gaps.keep_alive("m", 1, now, HOLD, LOAD_S, COLD_START_WAIT_GPUS)
    assert alive.source == "learned"
    assert PREWARM_MIN_S <= alive.prewarm_s <= 2400 and alive.window_s >= 3000


def test_levels_learn_apart_and_old_hours_age_out() -> None:
    gaps = IdleGaps()
    t = 0.0
    for _ in range(MIN_GAPS + 2):  # level 2 is needed briefly every 100 s; level 1 never idles
        gaps.observe("m", 2, t)
        gaps.observe("m", 1, t + 10)
        t += 100
    gaps.observe("m", 2, t)
    assert gaps.keep_alive("m", 2, t, HOLD, LOAD_S, COLD_START_WAIT_GPUS).gaps == MIN_GAPS + 2
    assert gaps.keep_alive("m", 1, t, HOLD, LOAD_S, COLD_START_WAIT_GPUS).gaps == 0
    later = t + SLICES * SLICE_S + 1
    assert gaps.keep_alive("m", 2, later, HOLD, LOAD_S, COLD_START_WAIT_GPUS).gaps == 0


def test_mostly_out_of_bounds_gaps_are_no_pattern_and_fall_back() -> None:
    gaps, now = gaps_of([5 * 3600.0] * 9 + [60.0] * 3)
    assert gaps.keep_alive("m", 1, now, HOLD, LOAD_S, COLD_START_WAIT_GPUS).source == "break-even"


def two_disk_fleet() -> FleetState:
    fleet = FleetState()
    fleet.add_model(ModelSpec("m", 16, 4, concurrency=4))
    for node, disk in (("fast", 6.0), ("slow", 0.5)):
        fleet.add_node(
            Node(node, "dc", "z", "on-demand", 3.0, [Device(0, f"{node}-0", "H100-80GB", 80.0)], disk_gib_per_s=disk)
        )
    return fleet


def test_scale_down_sheds_the_replica_cheapest_to_bring_back_not_the_longest_idle() -> None:
    fleet = two_disk_fleet()
    fast = fleet.add_replica("m", "fast", (0,)).id
    slow = fleet.add_replica("m", "slow", (0,)).id
    now = 100_000.0
    # The slow-disk replica has been idle longer; it reloads in 52 s against 23 s, so it is worth more kept.
    idle = {slow: now - 50_000, fast: now - 40_000}
    plan = plan_scaling(fleet, {"m": ScalingPolicy(min_replicas=1)}, idle, now, {}, Foresight())
    assert [a.replica_id for a in plan if isinstance(a, ScaleDown)] == [fast]
    # Without foresight (the fixed keep-alive), the longest idle goes: the old rule.
    plan = plan_scaling(fleet, {"m": ScalingPolicy(min_replicas=1)}, idle, now, {})
    assert [a.replica_id for a in plan if isinstance(a, ScaleDown)] == [slow]


def test_a_replica_holding_an_announced_steps_prefix_is_the_one_kept() -> None:
    fleet = two_disk_fleet()
    fast = fleet.add_replica("m", "fast", (0,)).id
    slow = fleet.add_replica("m", "slow", (0,)).id
    now = 100_000.0
    ahead = Foresight(intents=IntentBook())
    ahead.intents.announce("t1", "m", "awaiting_input", now - 30, replica_id=fast)  # type: ignore[union-attr]
    plan = plan_scaling(fleet, {}, {slow: now - 50_000, fast: now - 50_000}, now, {}, ahead)
    assert [a.replica_id for a in plan if isinstance(a, ScaleDown)] == [slow]  # one is kept for the step: fast


def test_a_head_prewarm_is_planned_before_the_shortest_gap_ends_and_kept_to_the_window_from_the_levels_idle() -> None:
    """A model idle 20 minutes between uses: with no replica, the scaler starts one just before the learned
    head (a pre-warm); the pre-warmed replica is then kept until the window, timed from when demand left."""
    fleet = two_disk_fleet()
    rng = random.Random(7)
    ahead = Foresight(intents=None)
    ahead.gaps, last = gaps_of([rng.uniform(1100, 1300) for _ in range(12)], busy_s=10)
    ahead.gaps.observe("m", 0, last + 10)  # the last use ends
    idle_from = last + 10
    plan_scaling(fleet, {}, {}, idle_from, {}, ahead)  # the tick that sees the model go idle
    early = plan_scaling(fleet, {}, {}, idle_from + 60, {}, ahead)
    assert not [a for a in early if isinstance(a, ScaleUp)]  # far from the head: nothing held, nothing loaded
    [head] = ahead.keep_alive["m"]
    assert head.source == "learned" and head.prewarm_s > 0
    later = plan_scaling(fleet, {}, {}, idle_from + head.prewarm_s, {}, ahead)
    [up] = [a for a in later if isinstance(a, ScaleUp)]
    assert up.prewarm and "pre-warm" in up.reason
    started = idle_from + head.prewarm_s
    replica = fleet.add_replica("m", "fast", (0,)).id
    window = ahead.keep_alive["m"][0].window_s
    kept = plan_scaling(fleet, {}, {replica: started}, idle_from + window - 2, {}, ahead)
    assert not [a for a in kept if isinstance(a, ScaleDown)]
    gone = plan_scaling(fleet, {}, {replica: started}, idle_from + window + 2, {}, ahead)
    assert [a.replica_id for a in gone if isinstance(a, ScaleDown)] == [replica]
