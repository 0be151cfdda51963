"""Hard filters: pure predicates that rule a node, device or replica out, and say why.

Each returns None when the candidate passes, else a short rejection name; placement counts
the names, so a request that waits can say what stopped it ("memory: 812, tenant_boundary: 3").
"""

from __future__ import annotations

from .decision import PlacementRequest
from .fleet import EPSILON_GIB, Device, ModelSpec, Node, Replica, Trust


def boundary_owner(request: PlacementRequest, trust: Trust) -> str | None:
    """The owner a device must have (or take) for this request: the tenant, unless it shares."""
    return request.tenant if trust != "shared" else None


def node_filter(request: PlacementRequest, node: Node, trust: Trust) -> str | None:
    if not node.healthy:
        return "unhealthy"
    if node.draining:
        return "draining"
    if node.id in request.exclude_nodes:
        return "excluded_node"
    if node.zone in request.exclude_zones:
        return "excluded_zone"
    if node.capacity == "spot" and node.zone in request.exclude_spot_zones:
        return "reclaimed_spot_zone"
    if trust == "dedicated" and node.dedicated_to != request.tenant:
        return "not_dedicated"
    if node.dedicated_to is not None and node.dedicated_to != request.tenant:
        return "dedicated_elsewhere"
    return None


def engine_filter(model: ModelSpec, node: Node) -> str | None:
    """A new replica needs a node that runs its engine: a CPU node with llama.cpp serves no simulated H100 model,
    and a GPU node without llama.cpp would only refuse the load."""
    if node.engines is not None and model.engine not in node.engines:
        return "engine"
    return None


def device_filter(request: PlacementRequest, device: Device, need_gib: float, owner: str | None) -> str | None:
    """Can a new replica's share (need_gib) go on this device for a request whose boundary owner is `owner`?"""
    if request.gpu_types is not None and device.type_name not in request.gpu_types:
        return "gpu_type"
    if device.replicas and device.owner != owner:
        # An isolated tenant never shares a GPU with anyone else, and nobody joins its GPUs.
        return "tenant_boundary"
    if device.free_gib + EPSILON_GIB < need_gib:
        return "memory"
    return None


def gang_fit(
    request: PlacementRequest, node: Node, degree: int, need_gib: float, owner: str | None, rejections: dict[str, int]
) -> tuple[int, ...] | None:
    """The `degree` devices of this one node a new replica should take, best fit first, or None.

    Tensor-parallel shards talk over NVLink on every layer, so a gang never spans nodes and
    never uses MIG instances (they have no peer-to-peer link). Best fit (least free memory
    that still fits, then lowest index) leaves the large free devices for large models. A device
    already holding a replica of the same model goes last: a second copy of the same weights there
    adds no speed, only a co-resident that halves both.
    """
    fitting: list[tuple[bool, float, int]] = []
    types = request.gpu_types
    for dev in node.devices:  # device_filter inlined (the hot loop of a cold placement), same order and names
        if degree > 1 and dev.mig_profile is not None:
            continue
        if types is not None and dev.type_name not in types:
            why = "gpu_type"
        elif dev.replicas and dev.owner != owner:
            why = "tenant_boundary"
        else:
            free = dev.memory_gib - dev.reserved_gib
            if free + EPSILON_GIB >= need_gib:
                fitting.append((request.model in dev.residents.values(), free, dev.index))
                continue
            why = "memory"
        rejections[why] = rejections.get(why, 0) + 1
    if len(fitting) < degree:
        if fitting:
            rejections["gang_fit"] = rejections.get("gang_fit", 0) + 1
        return None
    fitting.sort()
    return tuple(sorted(index for *_, index in fitting[:degree]))


def replica_filter(request: PlacementRequest, replica: Replica, node: Node, trust: Trust) -> str | None:
    """Can this request take a lease on this existing replica?"""
    if replica.state == "draining":
        return "replica_draining"
    if replica.active_leases >= replica.concurrency:
        return "replica_full"
    if (replica.tenant if replica.isolated else None) != boundary_owner(request, trust):
        return "tenant_boundary"
    why = node_filter(request, node, trust)
    if why is not None:
        return why
    if request.gpu_types is not None and node.device(replica.devices[0]).type_name not in request.gpu_types:
        return "gpu_type"
    return None
