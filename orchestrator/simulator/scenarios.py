"""The standard scenarios: one fleet, five kinds of agent traffic. `berth simulate --scenario NAME` and
benchmarks/simulate_scenarios.py run them; a user's own fleet and workload files replace either part.

The fleet: two datacenters, H100, L40S and A100 nodes, a third of them spot. The traffic (4 virtual
hours each):
- steady: sessions arrive at an even rate with a mild diurnal swing;
- bursty: a low base rate and, every 20 minutes on average, 60 sessions within a minute;
- spot-heavy: steady traffic, 30% of it batch (which Berth puts on spot), while spot nodes are reclaimed
  about every 2 hours each, 30 s notice;
- many-models: 16 fine-tunes of an 8B model beside the base models, popularity skewed (Zipf);
- agent-sessions: sessions shaped by the published statistics of GitHub Copilot's coding agent (turns, calls
  per turn, tool calls, 128:1 prompt:completion; agent_sessions.py says where each figure comes from).
"""

from __future__ import annotations

from dataclasses import replace

from ..catalogue import SEED_MODELS
from ..pool.fleet import ModelSpec
from ..pool.inventory import model_spec
from .agent_sessions import AGENT_SESSIONS
from .fleet_file import FleetFile, parse_fleet
from .workload import DEFAULT_MODELS, WorkloadSpec, zipf_shares

HOURS = 3600.0
STANDARD_FLEET: FleetFile = parse_fleet(
    {
        "nodes": [
            {"node_id": "east-h100", "count": 3, "datacenter": "east", "zone": "east-1a", "gpus": "8xH100-80GB"},
            {
                "node_id": "east-h100-spot",
                "count": 3,
                "datacenter": "east",
                "zone": "east-1b",
                "capacity": "spot",
                "gpus": "8xH100-80GB",
            },
            {"node_id": "west-l40s", "count": 4, "datacenter": "west", "zone": "west-1a", "gpus": "4xL40S-48GB"},
            {
                "node_id": "west-a100-spot",
                "count": 2,
                "datacenter": "west",
                "zone": "west-1b",
                "capacity": "spot",
                "gpus": "8xA100-80GB",
            },
        ]
    },
    source="scenarios.fleet",
)

FINE_TUNES = tuple(f"llama-3.1-8b-ft-{i:02d}" for i in range(1, 17))

SCENARIOS: dict[str, WorkloadSpec] = {
    "steady": WorkloadSpec(
        duration_s=4 * HOURS, sessions_per_hour=90, diurnal_amplitude=0.3, diurnal_period_s=4 * HOURS
    ),
    "bursty": WorkloadSpec(
        duration_s=4 * HOURS, sessions_per_hour=20, burst_every_s=1200, burst_sessions=60, burst_spread_s=60
    ),
    "spot-heavy": WorkloadSpec(
        duration_s=4 * HOURS,
        sessions_per_hour=90,
        batch_share=0.3,
        spot_preemptions_per_node_hour=0.5,
        preemption_notice_s=30,
    ),
    "many-models": WorkloadSpec(
        duration_s=4 * HOURS, sessions_per_hour=90, models=zipf_shares((*DEFAULT_MODELS, *FINE_TUNES), s=1.0)
    ),
    "agent-sessions": AGENT_SESSIONS,
}


def catalogue_models() -> dict[str, ModelSpec]:
    """The self-hosted models of Berth's catalogue as placement sees them, and the scenarios' fine-tunes
    (each an 8B model's size and speed under its own name: its own weights to load)."""
    models = {e.name: model_spec(e) for e in SEED_MODELS if e.provider == "self-hosted"}
    base = models["llama-3.1-8b"]
    models.update({name: replace(base, name=name) for name in FINE_TUNES})
    return models


def scenario(name: str) -> WorkloadSpec:
    try:
        return SCENARIOS[name]
    except KeyError:
        raise ValueError(f"scenario: unknown scenario {name!r}; known: {', '.join(SCENARIOS)}") from None
