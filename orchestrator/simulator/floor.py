"""The physical floor of a workload's GPU-hours: the prefill and decode work its calls need, done at the fleet's
best throughput with every GPU busy all the time, every cacheable prefix cached. No policy can serve the
workload on fewer GPU-hours, so each policy's cost reads as a multiple of it.

The same serving model as the simulated replicas (orchestrator/pool/serving_speed.py): a replica's full batch
writes the catalogue's tokens/s times its GPUs' speed, prefill runs `prefill_speedup` times faster per token,
and a replica holds the fewest GPUs of the model's tensor-parallel degrees that fit on the fastest type.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..pool.fleet import EPSILON_GIB, FleetState, ModelSpec
from ..pool.weights import PlacementConfig
from .plan import SessionPlan, Workload


def floor_gpu_hours(
    workload: Workload, models: Mapping[str, ModelSpec], fleet: FleetState, config: PlacementConfig
) -> float:
    """GPU-hours the workload's calls need at the best the fleet can do (module docstring)."""
    best = _best_gpu_per_model(models, fleet)
    seconds = 0.0

    def visit(session: SessionPlan) -> None:
        nonlocal seconds
        for index, call in enumerate(session.calls):
            if call.model not in best:
                continue
            speed, gpus = best[call.model]
            rate = models[call.model].tokens_per_s * speed
            cached = config.prefix_cacheable_fraction if index > 0 else 0.0
            prefill = call.prompt_tokens * (1 - cached) / (rate * config.prefill_speedup)
            seconds += gpus * (prefill + call.output_tokens / rate)
            if call.spawn is not None:
                visit(call.spawn)

    for session in workload.sessions:
        visit(session)
    return seconds / 3600


def _best_gpu_per_model(models: Mapping[str, ModelSpec], fleet: FleetState) -> dict[str, tuple[float, int]]:
    """Per model: (the fastest device speed it fits on, the fewest GPUs it takes there)."""
    best: dict[str, tuple[float, int]] = {}
    for name, spec in models.items():
        options = []
        for node in fleet.nodes.values():
            for device in node.devices:
                for degree in sorted(spec.tensor_parallel):
                    if device.memory_gib + EPSILON_GIB >= spec.memory_gib / degree and degree <= len(node.devices):
                        options.append((-device.speed, degree))
                        break
        if options:
            speed, degree = min(options)
            best[name] = (-speed, degree)
    return best
