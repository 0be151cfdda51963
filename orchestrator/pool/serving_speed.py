"""How fast a replica serves one call: its prefill, its decode at the batch it runs in, and the co-residents
that share its GPUs. One model of serving, read by placement's predictions (scorers.objective), the scaler and
`berth simulate`, whose simulated replicas decode by these same formulas.

- Prefill is compute-bound: `prefill_speedup` times faster per token than a full batch's decode.
- Decode is memory-bound: an iteration takes t0 + t1·batch, so a lone sequence writes several times its
  per-slot share of a full batch, and each sequence slows as the batch grows (continuous batching). Predictions
  take the full batch, where each sequence writes the batch's rate over its slots: the slowest a replica with a
  free slot gets, and a figure of its class alone (spare.py), where its batch now would not be.
- Replicas sharing a GPU read their weights through the same memory: with k of them generating, each runs at
  1/k of its speed, prefill and decode alike.
"""

from __future__ import annotations

from dataclasses import dataclass

from sdk.wire.objectives import DEFAULT_OBJECTIVES, LatencyObjectives

from .decision import Candidate, Decision, PlacementRequest
from .fleet import FleetState, Replica
from .weights import PlacementConfig


def sequence_rate(tokens_per_s: float, slots: int, batch: int, gain: float) -> float:
    """Tokens/s each of `batch` sequences decodes at on a replica whose full batch of `slots` writes
    `tokens_per_s` in all: t0 and t1 are set so that the full batch writes `tokens_per_s` and one sequence
    alone `gain` times its per-slot share."""
    if slots <= 1 or gain <= 1:
        return tokens_per_s / max(slots, 1)
    gain = min(gain, slots)
    per_token = (1 - 1 / gain) * slots / (tokens_per_s * (slots - 1))  # t1
    fixed = slots / (tokens_per_s * gain) - per_token  # t0
    return 1.0 / (fixed + per_token * min(max(batch, 1), slots))


def co_residents(fleet: FleetState, node_id: str, devices: tuple[int, ...], replica_id: str | None = None) -> int:
    """The most replicas on any of `devices` besides `replica_id`: a new replica there shares the GPU with them
    whenever their models are called."""
    node = fleet.nodes[node_id]
    return max((len(node.device(i).residents.keys() - {replica_id}) for i in devices), default=0)


def objectives_of(request: PlacementRequest) -> LatencyObjectives:
    return request.objectives if request.objectives is not None else DEFAULT_OBJECTIVES[request.priority]


@dataclass(frozen=True)
class Prediction:
    """What a candidate is predicted to give a call: for this call (its wait and any load included), and `steady_*`:
    for a new replica, the model's traffic once it serves (no load, the traffic's long prompt); for an existing
    one, the call on a replica of its own of that kind (no wait, no co-resident generating, no prefix cached),
    what more capacity could give it."""

    ttft_s: float
    tpot_s: float
    steady_ttft_s: float
    steady_tpot_s: float


def predict(
    request: PlacementRequest, cand: Candidate, fleet: FleetState, config: PlacementConfig, load_s: float = 0.0
) -> Prediction:
    """The call's time to first token and per output token on `cand`.

    An existing replica with a free slot takes the call into its running batch at once (continuous batching): it
    is judged by its prefill, its load while it loads, and its full batch's decode, each slowed by the replicas
    generating beside it on its GPUs now (`FleetState.sharing`, part of its class in spare.py, so the indexed
    ranking of replicas stays exact). A new replica is judged at its full batch beside every co-resident it
    would have, busy or not, since it will serve beside them for as long as it lives: for this call (after its
    `load_s`) and for the model's traffic (`traffic_prompt_tokens`)."""
    spec = fleet.models[request.model]
    if cand.replica_id is not None:
        replica = fleet.replicas[cand.replica_id]
        prompt = request.prompt_tokens
        if cand.replica_id == request.previous_replica:
            prompt = round(prompt * (1 - config.prefix_cacheable_fraction))
        wait = replica.load_s if cand.tier == "loading" else 0.0
        shared = _sharing(fleet, replica)
        prefill = shared * prompt / (replica.tokens_per_s * config.prefill_speedup)
        tpot = shared * replica.concurrency / replica.tokens_per_s  # a full batch: each writes rate ÷ slots
        # What a replica of its own would give the call: the whole prompt (no prefix cached there), no neighbour.
        alone = request.prompt_tokens / (replica.tokens_per_s * config.prefill_speedup)
        return Prediction(wait + prefill, tpot, alone, tpot / shared)
    node = fleet.nodes[cand.node_id]
    rate = spec.tokens_per_s * min(node.device(i).speed for i in cand.devices)
    shared = 1 + co_residents(fleet, cand.node_id, cand.devices)
    tpot = shared * spec.concurrency / rate
    per_token = shared / (rate * config.prefill_speedup)
    steady = max(request.prompt_tokens, request.traffic_prompt_tokens) * per_token
    return Prediction(load_s + request.prompt_tokens * per_token, tpot, steady, tpot)


# A new replica whose GPUs would serve the model's traffic outside its objectives counts this many misses: a
# replica outlives the call that started it, so hardware that cannot meet the objective loses to any that can.
UNFIT = 10.0


def objective_misses(
    request: PlacementRequest, cand: Candidate, fleet: FleetState, config: PlacementConfig, load_s: float
) -> float:
    """1 when the call is predicted to miss its objectives on `cand` (`predict`), plus `UNFIT` when a new replica
    there could not serve the model's traffic within them; 0 for objectives no single call can meet or miss
    (batch). Scored for every candidate of every decision, so it computes only the two times it needs."""
    objectives = request.objectives if request.objectives is not None else DEFAULT_OBJECTIVES[request.priority]
    if objectives.ttft_s is None and objectives.tpot_s is None:
        return 0.0
    speedup = config.prefill_speedup
    if cand.replica_id is not None:
        replica = fleet.replicas[cand.replica_id]
        prompt = request.prompt_tokens
        if cand.replica_id == request.previous_replica:
            prompt = round(prompt * (1 - config.prefix_cacheable_fraction))
        shared = _sharing(fleet, replica)
        ttft = (replica.load_s if cand.tier == "loading" else 0.0) + shared * prompt / (replica.tokens_per_s * speedup)
        return 0.0 if objectives.met(ttft, shared * replica.concurrency / replica.tokens_per_s) else 1.0
    node, spec = fleet.nodes[cand.node_id], fleet.models[request.model]
    rate = spec.tokens_per_s * min(node.device(i).speed for i in cand.devices)
    shared = 1 + co_residents(fleet, cand.node_id, cand.devices)
    ttft = load_s + shared * request.prompt_tokens / (rate * speedup)
    misses = 0.0 if objectives.met(ttft, shared * spec.concurrency / rate) else 1.0
    return misses + (UNFIT if _unfit(request, objectives, fleet, config, rate, shared) else 0.0)


def _sharing(fleet: FleetState, replica: Replica) -> int:
    """`FleetState.sharing`, read from the replica's class where it has one (every candidate with a free slot)."""
    slot = replica.spare_slot
    return slot.replica_class[6] if slot is not None else fleet.sharing(replica)


def misses_floor(
    request: PlacementRequest, fleet: FleetState, config: PlacementConfig, load_s: float, speed: float
) -> float:
    """The fewest misses (`objective_misses`) any new replica scores on GPUs of `speed` after a load of at least
    `load_s`: its predictions there are at least these, co-residents only slowing them. Lets placement skip a
    shelf of free capacity that cannot beat the replicas found: a long interactive prompt misses on every warm
    replica, and without this bound every shelf looked worth reading."""
    objectives = objectives_of(request)
    spec = fleet.models[request.model]
    rate = spec.tokens_per_s * speed
    if not objectives.per_call or rate <= 0:
        return 0.0
    per_token = 1 / (rate * config.prefill_speedup)
    misses = 0.0 if objectives.met(load_s + request.prompt_tokens * per_token, spec.concurrency / rate) else 1.0
    return misses + (UNFIT if _unfit(request, objectives, fleet, config, rate, 1) else 0.0)


def _unfit(
    request: PlacementRequest,
    objectives: LatencyObjectives,
    fleet: FleetState,
    config: PlacementConfig,
    rate: float,
    shared: int,
) -> bool:
    """Whether a new replica writing `rate` tokens/s alone, sharing its GPUs `shared` ways, would serve the model's
    traffic outside the part of its objectives the fleet can meet at all.

    Judged on the reachable part only: the traffic's long prompt as far as the fleet's fastest GPU, alone, can
    prefill it within the TTFT objective, and the TPOT objective only if that GPU's full batch meets it. A 70B
    whose full batch writes slower than 50 ms per token anywhere is then judged by its prompts alone, and a model
    whose long prompts take seconds anywhere still goes where the ones that can meet 1 s do: on a GPU of its own
    rather than beside another model, as the latency of the calls that can meet their objective asks."""
    spec = fleet.models[request.model]
    fastest = spec.tokens_per_s * max(fleet.type_speed.values(), default=0.0)
    if fastest <= 0 or rate <= 0:
        return False
    slots = spec.concurrency
    if objectives.ttft_s is not None:
        prompt = max(request.prompt_tokens, request.traffic_prompt_tokens)
        reachable = min(prompt, objectives.ttft_s * fastest * config.prefill_speedup)
        if reachable * shared / (rate * config.prefill_speedup) > objectives.ttft_s * (1 + 1e-9):
            return True
    if objectives.tpot_s is not None and slots / fastest <= objectives.tpot_s:
        return shared * slots / rate > objectives.tpot_s
    return False


@dataclass(frozen=True)
class Judgement:
    """A grant's predicted outcome against its call's objectives, for the scaler's attainment (traffic.py)."""

    met: bool
    fixable: bool  # a miss more capacity would have turned into a meet: a warm replica's wait, not a load or prefill
    target: float


def judge(decision: Decision, fleet: FleetState, config: PlacementConfig, waited_s: float) -> Judgement | None:
    """How the placed call is predicted to fare, judged before its booking, after it has waited `waited_s` for a
    slot (not counting waits for a load: capacity would not have shortened those); None for objectives no
    single call meets or misses (batch, low_priority)."""
    objectives = objectives_of(decision.request)
    chosen = decision.chosen
    if chosen is None or not objectives.per_call:
        return None
    load_s = chosen.terms.get("ttft", 0.0) if chosen.candidate.replica_id is None else 0.0
    p = predict(decision.request, chosen.candidate, fleet, config, load_s)
    met = objectives.met(waited_s + p.ttft_s, p.tpot_s)
    # A miss on a warm replica that its own prefill would not cause is its wait's for a slot: capacity fixes it.
    # A load's (a new or loading replica) is not: another load would take as long.
    fixable = chosen.candidate.tier == "warm" and objectives.met(p.steady_ttft_s, p.steady_tpot_s)
    return Judgement(met, fixable, objectives.target)
