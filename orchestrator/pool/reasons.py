"""Why a request cannot be placed: "never" (fail the task now) apart from "wait" (queue it).

"Never" reads only the fleet's hardware shapes, whatever their health or load, so a request
that merely finds the fleet busy is never failed, and one that no GPU here could ever hold is
never left queueing forever.
"""

from __future__ import annotations

from .decision import PlacementRequest
from .fleet import FleetState, ModelSpec, Trust

# The widest tensor-parallel degree suggested: 8 GPUs per node is the largest common NVLink domain.
MAX_SUGGESTED_TP = 8


def _fits(fleet: FleetState, request: PlacementRequest, need_gib: float, degree: int) -> bool:
    """Does any node's hardware have `degree` allowed devices each holding need_gib?"""
    for shape in fleet.shapes:
        n = 0
        for type_name, memory, mig in shape:
            if mig and degree > 1:
                continue
            if request.gpu_types is not None and type_name not in request.gpu_types:
                continue
            if memory + 1e-9 >= need_gib:
                n += 1
        if n >= degree:
            return True
    return False


def never_possible(fleet: FleetState, request: PlacementRequest, model: ModelSpec, trust: Trust) -> str | None:
    """A reason no node in this fleet could ever serve the request, or None when some could."""
    if trust == "dedicated" and not fleet.dedicated_nodes.get(request.tenant or ""):
        return (
            f"tenant {request.tenant} is dedicated and no node is dedicated to it by an operator"
            f' (PUT /v1/nodes/NODE_ID/trust {{"dedicated": "{request.tenant}"}})'
        )
    devices = [d for shape in fleet.shapes for d in shape]
    if request.gpu_types is not None:
        devices = [d for d in devices if d[0] in request.gpu_types]
        if not devices:
            return f"no GPU of type {', '.join(sorted(request.gpu_types))} in the fleet"
    if not devices:
        return "the fleet has no GPUs"
    degrees = request.tensor_parallel or model.tensor_parallel
    if any(_fits(fleet, request, model.memory_gib / d, d) for d in degrees):
        return None
    largest = max(memory for _, memory, _ in devices)
    degree_word = "tensor_parallel " + "/".join(str(d) for d in degrees)
    reason = f"{model.name} needs {model.memory_gib:g} GiB"
    if max(degrees) > 1:
        reason += f" ({model.memory_gib / max(degrees):g} GiB per GPU at {degree_word})"
    reason += f"; the largest GPU has {largest:g} GiB"
    workable = [d for d in range(2, MAX_SUGGESTED_TP + 1) if _fits(fleet, request, model.memory_gib / d, d)]
    bigger = [d for d in workable if d > max(degrees)]
    if bigger:
        return reason + f"; allow tensor_parallel ≥ {bigger[0]}"
    if workable:
        return reason + f"; allow tensor_parallel = {workable[0]}"
    return reason + "; no node has enough GPUs of that size to split it"
