"""Fleet routes: nodes join and heartbeat; operators list, inspect, admit, approve, drain, revoke and remove them.

The two kinds live on two routers: `node_router` for the node agents (join, heartbeat), which
carry no API key, and `router` for people and their tools, behind an API key like every
other user route: reading as much as the rest needs operator or admin, not confined to a tenant (the fleet
serves every tenant; a tenant's key learns nothing of other tenants' nodes, nor of nodes waiting to join).

Two secrets guard the writes from nodes. A join token lets a machine join at all: a per-node
token (`berth nodes admit`: one node id, once, expiring) admits it at once; a pool token
(`berth nodes pool-token create`, node_pools.py: a node pool's, capped, expiring) admits the
pool's nodes at once; the cluster's token (config `join_token`) leaves it pending until an
operator approves it, so one leaked cluster token gets a rogue machine no work and no tenant's
data (store/node_admission.py). The answer
to a first registration carries a node secret the control plane mints, which every heartbeat
(and any re-registration of the same id) must present in the `X-Berth-Node-Secret` header. So
a join token cannot be used to impersonate a node that already joined, a second machine started
with a copy-pasted node id is refused instead of silently taking over the first one's GPUs, and
revoking a node kills its secret.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from typing import Annotated, TypeVar

from fastapi import APIRouter, Body, Header, Path, Query, Request, Response, status

from sdk import Conflict, InvalidSpec, NotFound, Unauthorized
from sdk.wire.fleet import (
    NODE_ID_PATTERN,
    NODE_SECRET_HEADER,
    UNKNOWN_GPU_TYPE,
    AdmitRequest,
    NodeAdmission,
    NodeHeartbeat,
    NodeRegistered,
    NodeRegistration,
    NodeRevocation,
    NodeStatus,
    NodeTrust,
    NodeView,
    PreemptRequest,
    ReplicaView,
)

from ..node.gpu_types import GPU_TYPES, known_types
from ..store.fleet import NodeRevoked
from ..store.node_pools import PoolFull
from ..store.pending_nodes import PendingListFull, PendingRoom
from .auth import FleetReader, Operator
from .errors import ERROR_RESPONSES, ApiError, conflict, invalid, not_found
from .node_revocation import revoke_node
from .services import Services, Svc

node_router = APIRouter(tags=["fleet"], responses=ERROR_RESPONSES)
router = APIRouter(tags=["fleet"], responses=ERROR_RESPONSES)
NodeSecret = Annotated[str | None, Header(alias=NODE_SECRET_HEADER)]
NodeId = Annotated[str, Path(pattern=NODE_ID_PATTERN)]
T = TypeVar("T")


@node_router.post(
    "/v1/nodes/register",
    status_code=status.HTTP_201_CREATED,
    response_model=NodeRegistered,
    responses={
        200: {"model": NodeRegistered, "description": "the node was already registered"},
        401: {"description": "the join token is wrong, used, expired or revoked"},
        409: {"description": "the node id is held by another node (or, for a pool token, by a revoked one)"},
        429: {
            "description": "pending_nodes_max nodes already wait for approval, or a pool token's max_nodes are in"
            " the fleet; Retry-After: when to ask again"
        },
    },
)
async def register(
    reg: NodeRegistration, response: Response, svc: Svc, node_secret: NodeSecret = None
) -> NodeRegistered:
    """Join the fleet (201: admitted with a per-node or a pool token, `pending` with the cluster token), or
    re-register a node that presents its node secret (200). The node secret is always the control plane's: one
    sent with a first registration is ignored. 429 when the list of nodes waiting for approval is full
    (store/pending_nodes.py), or a pool token's nodes hold every place it has (store/node_pools.py)."""
    _check_gpu_types(reg)
    cluster = _is_cluster_token(svc, reg.join_token)
    try:
        joined = await _call(
            svc,
            svc.store.node_admission.join,
            reg.spec(),
            node_secret,
            reg.join_token,
            cluster_token=cluster,
            waiting=_pending_room(svc),
        )
    except ApiError as exc:
        if exc.field == "join_token" and exc.status == 401 and not svc.config.join_token:
            raise ApiError(
                401,
                f"{exc.message}; this control plane has no cluster join token (BERTH_JOIN_TOKEN),"
                " so only per-node and pool tokens let nodes in",
                field="join_token",
            ) from None
        raise
    if not joined.created:
        response.status_code = status.HTTP_200_OK
    return NodeRegistered(node=joined.node, node_secret=joined.node_secret)


@node_router.post(
    "/v1/nodes/{node_id}/heartbeat",
    response_model=NodeView,
    responses={401: {"description": "the node secret is missing or wrong"}},
)
async def heartbeat(
    node_id: str, hb: NodeHeartbeat, svc: Svc, request: Request, node_secret: NodeSecret = None
) -> NodeView:
    """A node's metrics, cached weights and replicas, replacing the previous report."""
    if hb.node_id != node_id:
        raise invalid("node_id", f"the body names node {hb.node_id!r} but the path names {node_id!r}")
    if hb.peer_port is not None and hb.peer_host in (None, "0.0.0.0", "::") and request.client is not None:
        # A peer server bound to every interface names none: peers reach it where its heartbeats come from.
        hb = hb.model_copy(update={"peer_host": request.client.host})
    return await _call(svc, svc.store.fleet.heartbeat, hb, node_secret)


@router.get("/v1/nodes", response_model=list[NodeView])
async def list_nodes(
    svc: Svc,
    _caller: FleetReader,
    status: Annotated[NodeStatus | None, Query()] = None,
    datacenter: Annotated[str | None, Query(max_length=63)] = None,
) -> list[NodeView]:
    """Every node, nodes waiting for approval included (those that waited past pending_node_ttl_s are dropped
    first). Only for fleet roles: the fleet serves every tenant, and a rogue node's id is nobody else's business."""
    await svc.db(svc.store.node_admission.drop_stale, svc.config.pending_node_ttl_s)
    return await svc.db(svc.store.fleet.list, status, datacenter)


@router.get("/v1/nodes/{node_id}", response_model=NodeView)
async def get_node(node_id: str, svc: Svc, _caller: FleetReader) -> NodeView:
    node = await svc.db(svc.store.fleet.get, node_id)
    if node is None:
        raise not_found(f"node {node_id!r} is not registered", field="node_id")
    return node


@router.post(
    "/v1/nodes/{node_id}/admit",
    status_code=status.HTTP_201_CREATED,
    response_model=NodeAdmission,
    responses={409: {"description": "the node is admitted already"}},
)
async def admit(
    node_id: NodeId, svc: Svc, caller: Operator, req: Annotated[AdmitRequest | None, Body()] = None
) -> NodeAdmission:
    """A per-node join token: it lets `node_id` join once, admitted at once, until it expires (1 h by default)."""
    return await _call(svc, svc.store.node_admission.mint, node_id, (req or AdmitRequest()).ttl_s, caller.key_id)


@router.post("/v1/nodes/{node_id}/approve", response_model=NodeView)
async def approve(node_id: str, svc: Svc, _caller: Operator) -> NodeView:
    """Let a node that joined with the cluster token (`pending`) into the fleet: placement may use it now."""
    return await _call(svc, svc.store.node_admission.approve, node_id)


@router.put("/v1/nodes/{node_id}/trust", response_model=NodeView)
async def set_trust(node_id: str, trust: NodeTrust, svc: Svc, _caller: Operator) -> NodeView:
    """Set the node's trust labels (`dedicated`: the one tenant placed on it), replacing those set before: the only
    ones placement's trust boundaries read. A label the node registers itself is its own word and is not read."""
    return await _call(svc, svc.store.fleet.set_trust, node_id, trust.labels())


@router.post("/v1/nodes/{node_id}/revoke", response_model=NodeRevocation)
async def revoke(node_id: str, svc: Svc, _caller: Operator) -> NodeRevocation:
    """Kill the node's credential now (heartbeats and step books answer 401), take it out of placement, and tell
    the tasks it runs steps for to move them. It comes back only if admitted again."""
    return await _call_async(revoke_node(svc, node_id, remove=False))


@router.delete("/v1/nodes/{node_id}", response_model=NodeRevocation)
async def remove(node_id: str, svc: Svc, _caller: Operator) -> NodeRevocation:
    """Revoke the node, then forget it (its GPUs, replicas, weights, reservations and leases), so its id may
    be admitted anew."""
    return await _call_async(revoke_node(svc, node_id, remove=True))


@router.post("/v1/nodes/{node_id}/drain", response_model=NodeView)
async def drain(node_id: str, svc: Svc, _caller: Operator) -> NodeView:
    """No new placements on the node; its replicas finish what they serve."""
    return await _call(svc, svc.store.fleet.drain, node_id)


@router.post("/v1/nodes/{node_id}/undrain", response_model=NodeView)
async def undrain(node_id: str, svc: Svc, _caller: Operator) -> NodeView:
    return await _call(svc, svc.store.fleet.undrain, node_id)


@router.post("/v1/nodes/{node_id}/preempt", response_model=NodeView)
async def preempt(
    node_id: str, svc: Svc, _caller: Operator, req: Annotated[PreemptRequest | None, Body()] = None
) -> NodeView:
    """A preemption notice: no new placements; the node finishes what it can and leaves within `notice_s`.
    Its tasks resume on other nodes from their last checkpoints."""
    return await _call(svc, svc.store.fleet.preempt, node_id, (req or PreemptRequest()).notice_s)


@router.get("/v1/replicas", response_model=list[ReplicaView])
async def list_replicas(
    svc: Svc, _caller: FleetReader, model: Annotated[str | None, Query(max_length=128)] = None
) -> list[ReplicaView]:
    return await svc.db(svc.store.fleet.replicas, model)


def _pending_room(svc: Services) -> PendingRoom:
    return PendingRoom(max_nodes=svc.config.pending_nodes_max, ttl_s=svc.config.pending_node_ttl_s)


def _is_cluster_token(svc: Services, presented: str) -> bool:
    expected = svc.config.join_token
    # compare_digest: the time a wrong token takes to refuse must not tell how much of it was right.
    return bool(expected) and hmac.compare_digest(presented.encode(), (expected or "").encode())


def _check_gpu_types(reg: NodeRegistration) -> None:
    """A GPU type the catalogue does not know could not be priced or sped; refuse it by name."""
    for i, gpu in enumerate(reg.gpus):
        if gpu.type_name != UNKNOWN_GPU_TYPE and gpu.type_name not in GPU_TYPES:
            raise invalid(
                f"gpus.{i}.type_name",
                f"unknown GPU type {gpu.type_name!r}; known: {known_types()}, or {UNKNOWN_GPU_TYPE!r}",
            )


async def _call(svc: Services, fn: Callable[..., T], *args: object, **kwargs: object) -> T:
    """A fleet store call, its refusals turned into the API's error shape."""
    return await _call_async(svc.db(fn, *args, **kwargs))


async def _call_async(call: Awaitable[T]) -> T:
    try:
        return await call
    except NotFound as exc:
        raise not_found(exc.message, field=exc.field) from None
    except (PendingListFull, PoolFull) as exc:
        raise ApiError(429, exc.message, field=exc.field, headers={"Retry-After": str(exc.retry_after_s)}) from None
    except Conflict as exc:
        raise conflict(exc.message, field=exc.field) from None
    except Unauthorized as exc:
        # Only the revoked node's own agent is told so (fleet.py), by a code it can stop on without reading words.
        code = "revoked" if isinstance(exc, NodeRevoked) else None
        raise ApiError(exc.status_code or 401, exc.message, field=exc.field, code=code) from None
    except InvalidSpec as exc:
        raise invalid(exc.field, exc.message) from None
