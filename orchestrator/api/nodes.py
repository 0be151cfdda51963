"""Fleet routes: nodes join and heartbeat; operators list, inspect, drain and undrain them.

The two kinds live on two routers: `node_router` for the node agents (join, heartbeat), which
carry no API key, and `router` for people and their tools, behind an API key like every
other user route (reading needs any role; drain, undrain and preempt need operator or admin).

Two secrets guard the writes from nodes. The cluster's join token (config `join_token`) lets
a machine join at all; the answer to a registration carries a node secret of its own, which
every heartbeat (and any re-registration of the same id) must present in the
`X-Berth-Node-Secret` header. So one leaked join token cannot be used to impersonate a node
that already joined, and a second machine started with a copy-pasted node id is refused
instead of silently taking over the first one's GPUs.
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Callable
from typing import Annotated

from fastapi import APIRouter, Body, Header, Query, Response, status

from sdk import Conflict, InvalidSpec, NotFound, Unauthorized
from sdk._fleet import (
    NODE_SECRET_HEADER,
    UNKNOWN_GPU_TYPE,
    NodeHeartbeat,
    NodeRegistered,
    NodeRegistration,
    NodeStatus,
    NodeView,
    PreemptRequest,
    ReplicaView,
)

from ..node.gpu_types import GPU_TYPES, known_types
from .auth import Caller, Operator
from .errors import ERROR_RESPONSES, ApiError, conflict, invalid, not_found
from .principal import Principal
from .services import Services, Svc

node_router = APIRouter(tags=["fleet"], responses=ERROR_RESPONSES)
router = APIRouter(tags=["fleet"], responses=ERROR_RESPONSES)
NodeSecret = Annotated[str | None, Header(alias=NODE_SECRET_HEADER)]

_NODE_SECRET_BYTES = 32  # 256 bits, as urlsafe base64
DEDICATED_LABEL = "dedicated"  # the pool places only that tenant's steps on such a node (pool/filters.py)
ANOTHER_TENANT = "(another tenant)"  # no tenant can be called this (NAME_PATTERN)


@node_router.post("/v1/nodes/register", status_code=status.HTTP_201_CREATED, response_model=NodeRegistered,
             responses={200: {"model": NodeRegistered, "description": "the node was already registered"},
                        401: {"description": "the join token is wrong"}})
async def register(reg: NodeRegistration, response: Response, svc: Svc,
                   node_secret: NodeSecret = None) -> NodeRegistered:
    """Join the fleet (201), or re-register a node that presents its node secret (200)."""
    _check_join_token(svc, reg.join_token)
    _check_gpu_types(reg)
    secret = node_secret or secrets.token_urlsafe(_NODE_SECRET_BYTES)
    existed = await svc.db(svc.store.fleet.get, reg.node_id) is not None
    node = await _call(svc, svc.store.fleet.register, reg.spec(), secret)
    if existed:
        response.status_code = status.HTTP_200_OK
    return NodeRegistered(node=node, node_secret=secret)


@node_router.post("/v1/nodes/{node_id}/heartbeat", response_model=NodeView,
             responses={401: {"description": "the node secret is missing or wrong"}})
async def heartbeat(node_id: str, hb: NodeHeartbeat, svc: Svc, node_secret: NodeSecret = None) -> NodeView:
    """A node's metrics, cached weights and replicas, replacing the previous report."""
    if hb.node_id != node_id:
        raise invalid("node_id", f"the body names node {hb.node_id!r} but the path names {node_id!r}")
    return await _call(svc, svc.store.fleet.heartbeat, hb, node_secret)


@router.get("/v1/nodes", response_model=list[NodeView])
async def list_nodes(svc: Svc, caller: Caller, status: Annotated[NodeStatus | None, Query()] = None,
                     datacenter: Annotated[str | None, Query(max_length=63)] = None) -> list[NodeView]:
    """Every node (the fleet serves every tenant); one dedicated to another tenant does not say which."""
    return [seen_by(caller, node) for node in await svc.db(svc.store.fleet.list, status, datacenter)]


@router.get("/v1/nodes/{node_id}", response_model=NodeView)
async def get_node(node_id: str, svc: Svc, caller: Caller) -> NodeView:
    node = await svc.db(svc.store.fleet.get, node_id)
    if node is None:
        raise not_found(f"node {node_id!r} is not registered", field="node_id")
    return seen_by(caller, node)


@router.post("/v1/nodes/{node_id}/drain", response_model=NodeView)
async def drain(node_id: str, svc: Svc, caller: Operator) -> NodeView:
    """No new placements on the node; its replicas finish what they serve."""
    return seen_by(caller, await _call(svc, svc.store.fleet.drain, node_id))


@router.post("/v1/nodes/{node_id}/undrain", response_model=NodeView)
async def undrain(node_id: str, svc: Svc, caller: Operator) -> NodeView:
    return seen_by(caller, await _call(svc, svc.store.fleet.undrain, node_id))


@router.post("/v1/nodes/{node_id}/preempt", response_model=NodeView)
async def preempt(node_id: str, svc: Svc, caller: Operator, req: Annotated[PreemptRequest | None, Body()] = None) -> NodeView:
    """A preemption notice: no new placements; the node finishes what it can and leaves within `notice_s`.
    Its tasks resume on other nodes from their last checkpoints."""
    return seen_by(caller, await _call(svc, svc.store.fleet.preempt, node_id, (req or PreemptRequest()).notice_s))


@router.get("/v1/replicas", response_model=list[ReplicaView])
async def list_replicas(svc: Svc, model: Annotated[str | None, Query(max_length=128)] = None) -> list[ReplicaView]:
    return await svc.db(svc.store.fleet.replicas, model)


def seen_by(caller: Principal, node: NodeView) -> NodeView:
    """The node as `caller` may see it: a key confined to one tenant must not learn other tenants' names (nor
    that they exist) from the label that dedicates a node to one; it learns only that the node is not for it."""
    owner = node.labels.get(DEDICATED_LABEL)
    if owner is None or caller.sees(owner):
        return node
    return node.model_copy(update={"labels": {**node.labels, DEDICATED_LABEL: ANOTHER_TENANT}})


def _check_join_token(svc: Services, presented: str) -> None:
    expected = svc.config.join_token
    if not expected:
        raise ApiError(401, "this control plane has no join token configured (BERTH_JOIN_TOKEN); no node can join",
                       field="join_token")
    # compare_digest: the time a wrong token takes to refuse must not tell how much of it was right.
    if not hmac.compare_digest(presented.encode(), expected.encode()):
        raise ApiError(401, "the join token is wrong; use the one in the control plane's <data_dir>/join-token",
                       field="join_token")


def _check_gpu_types(reg: NodeRegistration) -> None:
    """A GPU type the catalogue does not know could not be priced or sped; refuse it by name."""
    for i, gpu in enumerate(reg.gpus):
        if gpu.type_name != UNKNOWN_GPU_TYPE and gpu.type_name not in GPU_TYPES:
            raise invalid(f"gpus.{i}.type_name",
                          f"unknown GPU type {gpu.type_name!r}; known: {known_types()}, or {UNKNOWN_GPU_TYPE!r}")


async def _call(svc: Services, fn: Callable[..., NodeView], *args: object) -> NodeView:
    """A fleet store call, its refusals turned into the API's error shape."""
    try:
        return await svc.db(fn, *args)
    except NotFound as exc:
        raise not_found(exc.message, field=exc.field) from None
    except Conflict as exc:
        raise conflict(exc.message, field=exc.field) from None
    except Unauthorized as exc:
        raise ApiError(401, exc.message, field=exc.field) from None
    except InvalidSpec as exc:
        raise invalid(exc.field, exc.message) from None
