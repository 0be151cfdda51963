"""Run one workload on one fleet under several policies, each in its own fresh simulation.

`always-warm` holds every model at the peak replica count the `berth` run reached, so a comparison
that asks for it runs `berth` first (and reports it too).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..pool.fleet import ModelSpec
from .engine import DEFAULT_SETTINGS, SimSettings, Simulation
from .fleet_file import FleetFile
from .plan import Workload
from .policies import POLICY_NAMES, policy_named
from .results import SimResult


def spot_nodes(fleet: FleetFile) -> list[str]:
    return [node.id for node, _ in fleet.expand() if node.capacity == "spot"]


def node_names(fleet: FleetFile) -> list[str]:
    return [node.id for node, _ in fleet.expand()]


def peak_replicas(result: SimResult) -> dict[str, int]:
    """Each model's most replicas at any scaler tick of a run."""
    peaks: dict[str, int] = {}
    for _at, counts in result.replica_samples:
        for model, count in counts.items():
            peaks[model] = max(peaks.get(model, 0), count)
    return peaks


def run_policies(
    fleet: FleetFile,
    models: Mapping[str, ModelSpec],
    workload: Workload,
    names: Sequence[str],
    seed: int,
    settings: SimSettings = DEFAULT_SETTINGS,
    baseline_node_cache: bool = False,
) -> list[SimResult]:
    """One result per policy, in POLICY_NAMES order; `berth` added when `always-warm` needs its peaks."""
    unknown = [n for n in names if n not in POLICY_NAMES]
    if unknown:
        raise ValueError(f"policy: unknown policy {unknown[0]!r}; known: {', '.join(POLICY_NAMES)}")
    wanted = set(names) | ({"berth"} if "always-warm" in names else set())
    config = fleet.placement_config()
    results: dict[str, SimResult] = {}
    for name in POLICY_NAMES:
        if name not in wanted:
            continue
        peaks = peak_replicas(results["berth"]) if name == "always-warm" else None
        policy = policy_named(name, config, seed, peaks, baseline_node_cache)
        results[name] = Simulation(fleet, models, workload, policy, seed, settings).run()
    return list(results.values())
