"""Scorers: small pure functions of (request, candidate, fleet, config), lower is better.

Each returns a raw value in its own unit; `ScorerWeights` turns it into seconds of expected
time-to-first-token so the terms add, and a Decision can name the one that decided.
"""

from __future__ import annotations

from collections.abc import Callable

from ..weights_transfer import GIB
from .decision import Candidate, PlacementRequest
from .fleet import FleetState, Node, Replica
from .serving_speed import misses_floor, objective_misses
from .weights import PlacementConfig

Scorer = Callable[[PlacementRequest, Candidate, FleetState, PlacementConfig], float]


def replica_throughput(fleet: FleetState, replica: Replica) -> float:
    """Tokens/s the replica's batch produces: the catalogue's rate on its slowest device."""
    return replica.tokens_per_s


def load_seconds(fleet: FleetState, model: str, node: Node, tier: str, config: PlacementConfig) -> float:
    """How long a new replica takes to be ready, from where its weights are.

    Weights always land in the node's disk cache first (so an unload keeps them), then load
    from it: a copy from the same datacenter or from origin adds its transfer to the disk read.
    Each rate is the one learned from measured transfers (`fleet.bandwidth`), the configured one
    until a transfer was measured, so a slow peer or a fast origin changes the decision.
    """
    weights = fleet.models[model].weights_gib
    bandwidth = fleet.bandwidth
    seconds = weights / bandwidth.disk_gib_per_s(node) + config.engine_start_s
    if tier == "datacenter":
        seconds += weights / bandwidth.datacenter_gib_per_s(fleet, model, node, config)
    elif tier == "origin":
        seconds += weights / bandwidth.origin_gib_per_s(node, config)
    return seconds


def queue_wait(fleet: FleetState, replica: Replica) -> float:
    """Seconds a new lease waits for its first token on a replica with a free slot (every replica candidate has one).

    Continuous batching admits it into the running batch at once: it never waits for the batch to drain
    (`replica.queue_s`, outstanding reserved tokens over throughput), only for its share of each iteration,
    that drain shared among the batch's slots. Still tokens, not requests, since a step costs 1–100k of them.
    Charging the whole drain made a busy replica with free slots look slower than a cold load, so steps
    started replicas (and waited for their loads) beside ones that could serve them at once.
    """
    return replica.queue_s / max(replica.concurrency, 1)


def generation(request: PlacementRequest, cand: Candidate, fleet: FleetState, config: PlacementConfig) -> float:
    """Seconds to prefill the prompt and write the reserved answer on the candidate's devices.

    A batch shares its throughput among its slots, so one lease writes at tokens_per_s / concurrency of the
    slowest device. An L4 writes ~8× slower than an H100: over a thousand-token answer that is minutes, which
    no cheaper hour makes up for, and which a first-token estimate alone never sees. Batch and low_priority
    steps are judged by what they cost, not how long they take (the cost term counts the GPU time they
    hold), so for them it is 0 and they still go to spot and cheap GPUs.
    """
    if cand.replica_id is not None:
        replica = fleet.replicas[cand.replica_id]
        return _writing_seconds(request, replica.tokens_per_s, replica.concurrency, config)
    node, spec = fleet.nodes[cand.node_id], fleet.models[request.model]
    rate = spec.tokens_per_s * min(node.device(i).speed for i in cand.devices)
    return _writing_seconds(request, rate, spec.concurrency, config)


def _writing_seconds(request: PlacementRequest, rate: float, slots: int, config: PlacementConfig) -> float:
    """`generation` once the candidate's batch throughput and slots are known (shared with `weighted_total`)."""
    if request.priority != "interactive":
        return 0.0
    answer = max(request.tokens - request.prompt_tokens, 0)
    return request.prompt_tokens / (rate * config.prefill_speedup) + answer * max(slots, 1) / rate


def new_replica_floor(
    request: PlacementRequest, fleet: FleetState, config: PlacementConfig, tier: str, speed: float
) -> float:
    """A total no new replica of the model scores below on any node of `tier` whose devices run at `speed`: its
    load at the fastest rates the fleet has had for that tier, plus its generation at that speed and the latency
    objectives it must miss there (`serving_speed.misses_floor`), every other term at its least (0). A request that a candidate already serves for less needs no search there. True only
    while no weight is below 0."""
    spec = fleet.models[request.model]
    bandwidth = fleet.bandwidth
    disk = max(fleet.fastest_disk_gib_per_s, bandwidth.fastest_disk / GIB)
    if disk <= 0 or speed <= 0:
        return 0.0
    load = spec.weights_gib / disk + config.engine_start_s
    if tier == "datacenter":
        load += spec.weights_gib / max(config.intra_dc_gib_per_s, bandwidth.fastest_peer / GIB)
    elif tier == "origin":
        load += spec.weights_gib / max(config.wan_gib_per_s, bandwidth.fastest_origin / GIB)
    generation_s = _writing_seconds(request, spec.tokens_per_s * speed, spec.concurrency, config)
    misses = misses_floor(request, fleet, config, load, speed)
    return config.weights.ttft * load + config.weights.generation * generation_s + config.weights.objective * misses


def ttft(request: PlacementRequest, cand: Candidate, fleet: FleetState, config: PlacementConfig) -> float:
    """Expected seconds to first token, from the candidate's locality tier."""
    if cand.replica_id is not None:
        replica = fleet.replicas[cand.replica_id]
        wait = queue_wait(fleet, replica)
        return wait + replica.load_s if cand.tier == "loading" else wait
    return load_seconds(fleet, request.model, fleet.nodes[cand.node_id], cand.tier, config)


def cost(request: PlacementRequest, cand: Candidate, fleet: FleetState, config: PlacementConfig) -> float:
    """Dollars: the node's price for the devices used × the time they are held, spot grossed up by its risk.

    A lease on an existing replica holds its share for the wait and the generation; a new
    replica also for its load and the idle window after, which is what scale-up really costs.
    """
    node = fleet.nodes[cand.node_id]
    share = node.usd_per_hour * len(cand.devices) / max(len(node.devices), 1)
    speed = min(node.device(i).speed for i in cand.devices)
    generate_s = request.tokens / (fleet.models[request.model].tokens_per_s * speed)
    held_s = ttft(request, cand, fleet, config) + generate_s
    if cand.replica_id is None:
        held_s += config.replica_min_hold_s  # a new replica keeps its GPUs for the idle window
    usd = share * held_s / 3600
    if node.capacity == "spot":
        # A reclaimed step is paid again: spot's discount only counts net of its preemption risk.
        risk = node.preemption_risk if node.preemption_risk is not None else config.spot_preemption_risk
        usd *= 1 + risk
    return usd


def fragmentation(request: PlacementRequest, cand: Candidate, fleet: FleetState, config: PlacementConfig) -> float:
    """Capacity a new replica strands: leftover fraction of each device it takes, +1 for breaking a whole free node.

    Taking 16 GiB of an empty 80 GiB GPU leaves 0.8 of it for models that may not fit there;
    the same replica on a 24 GiB GPU leaves 0.33. A warm replica strands nothing new.
    """
    if cand.replica_id is not None:
        return 0.0
    node = fleet.nodes[cand.node_id]
    need = fleet.models[request.model].memory_gib / len(cand.devices)
    leftover = 0.0
    for i in cand.devices:
        dev = node.device(i)
        leftover += max(dev.free_gib - need, 0.0) / dev.memory_gib
    # A gang that takes every device breaks nothing: the scan of the node's devices is only for a smaller one.
    breaks_node = len(cand.devices) < len(node.devices) and all(d.replicas == 0 for d in node.devices)
    return leftover + (1.0 if breaks_node else 0.0)


def affinity(request: PlacementRequest, cand: Candidate, fleet: FleetState, config: PlacementConfig) -> float:
    """Minus the prefill seconds saved on the replica that served the previous step (its KV cache has the prefix)."""
    if cand.replica_id is None or cand.replica_id != request.previous_replica:
        return 0.0
    replica = fleet.replicas[cand.replica_id]
    if replica.queue_s > config.affinity_max_queue_s:
        return 0.0  # overloaded: its KV cache has likely evicted the prefix for the batch's own
    prefill_rate = replica_throughput(fleet, replica) * config.prefill_speedup
    return -(request.prompt_tokens * config.prefix_cacheable_fraction) / prefill_rate


def capacity_class(request: PlacementRequest, cand: Candidate, fleet: FleetState, config: PlacementConfig) -> float:
    """1 when the node's class is the wrong one: interactive on spot, or new on-demand capacity for batch.

    A preemption costs an interactive user a cold start; batch and low_priority work only loses
    time, so it should not start replicas on on-demand GPUs, but a warm on-demand replica with a
    free slot is already paid for and may serve it.
    """
    spot = fleet.nodes[cand.node_id].capacity == "spot"
    if request.priority == "interactive":
        return 1.0 if spot else 0.0
    return 0.0 if spot or cand.replica_id is not None else 1.0


def objective(request: PlacementRequest, cand: Candidate, fleet: FleetState, config: PlacementConfig) -> float:
    """Predicted misses of the call's latency objectives on the candidate (serving_speed.objective_misses)."""
    load_s = (
        0.0
        if cand.replica_id is not None
        else load_seconds(fleet, request.model, fleet.nodes[cand.node_id], cand.tier, config)
    )
    return objective_misses(request, cand, fleet, config, load_s)


# Name → scorer; the names are the ScorerWeights fields and the keys of a Decision's terms.
SCORERS: dict[str, Scorer] = {
    "ttft": ttft,
    "generation": generation,
    "cost": cost,
    "fragmentation": fragmentation,
    "affinity": affinity,
    "capacity_class": capacity_class,
    "objective": objective,
}


_BUILTIN = (ttft, generation, cost, fragmentation, affinity, capacity_class, objective)


def weighted_total(request: PlacementRequest, cand: Candidate, fleet: FleetState, config: PlacementConfig) -> float:
    """sum(weight × scorer) over SCORERS, bit for bit, with the shared lookups done once.

    The ranking loop scores every candidate; this computes ttft once (cost reuses it) and reads
    the node and model once. Same terms, same order of addition as the generic sum, so totals
    and ties are identical. Falls back to the generic sum if SCORERS was changed.
    """
    w = config.weights
    if tuple(SCORERS.values()) != _BUILTIN:
        return sum(getattr(w, name) * scorer(request, cand, fleet, config) for name, scorer in SCORERS.items())
    node = fleet.nodes[cand.node_id]
    rid = cand.replica_id
    speed = min(node.device(i).speed for i in cand.devices)
    if rid is not None:
        replica = fleet.replicas[rid]
        wait = queue_wait(fleet, replica)
        t = wait + replica.load_s if cand.tier == "loading" else wait
        gen = _writing_seconds(request, replica.tokens_per_s, replica.concurrency, config)
    else:
        t = load_seconds(fleet, request.model, node, cand.tier, config)
        spec = fleet.models[request.model]
        gen = _writing_seconds(request, spec.tokens_per_s * speed, spec.concurrency, config)
    share = node.usd_per_hour * len(cand.devices) / max(len(node.devices), 1)
    held_s = t + request.tokens / (fleet.models[request.model].tokens_per_s * speed)
    if rid is None:
        held_s += config.replica_min_hold_s
    usd = share * held_s / 3600
    spot = node.capacity == "spot"
    if spot:
        risk = node.preemption_risk if node.preemption_risk is not None else config.spot_preemption_risk
        usd *= 1 + risk
    frag = fragmentation(request, cand, fleet, config) if rid is None else 0.0
    aff = affinity(request, cand, fleet, config) if rid is not None and rid == request.previous_replica else 0.0
    if request.priority == "interactive":
        cc = 1.0 if spot else 0.0
    else:
        cc = 0.0 if spot or rid is not None else 1.0
    misses = objective_misses(request, cand, fleet, config, 0.0 if rid is not None else t)
    return sum(
        (
            w.ttft * t,
            w.generation * gen,
            w.cost * usd,
            w.fragmentation * frag,
            w.affinity * aff,
            w.capacity_class * cc,
            w.objective * misses,
        )
    )
