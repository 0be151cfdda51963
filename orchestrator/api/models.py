"""Model catalogue routes: list and read models, add or edit one, set its scaling policy, prewarm it."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Annotated

from fastapi import APIRouter, Body, Response, status
from temporalio.service import RPCError

from sdk.wire.catalogue import CatalogueModel, ModelEntry, PrewarmRequest, PrewarmStarted, PrewarmTarget, ScalingPolicy
from sdk.wire.node_io import PREWARM_WORKFLOW, Prewarm, PrewarmOnNode

from ..pool.feasibility import unservable_by_any_gpu
from ..pool.prewarm import PrewarmRefused, prewarm_targets, weights_bytes
from .auth import Operator
from .errors import ERROR_RESPONSES, invalid, not_found, unavailable
from .services import Services, Svc
from .temporal_gateway import CONNECT_TIMEOUT_S, TemporalUnavailable

router = APIRouter(prefix="/v1/models", tags=["models"], responses=ERROR_RESPONSES)


@router.get("", response_model=list[CatalogueModel])
async def list_models(svc: Svc) -> list[CatalogueModel]:
    return await svc.db(svc.store.models.list)


@router.get("/{name:path}/policy", response_model=ScalingPolicy)
async def get_policy(name: str, svc: Svc) -> ScalingPolicy:
    return (await _existing(svc, name)).policy


@router.put("/{name:path}/policy", response_model=CatalogueModel)
async def set_policy(name: str, policy: ScalingPolicy, svc: Svc, _caller: Operator) -> CatalogueModel:
    """Replace the model's scaling policy (min/max replicas, idle window, scaler, warm buffer)."""
    await _existing(svc, name)
    updated = await svc.db(svc.store.models.set_policy, name, policy)
    assert updated is not None  # checked just above; models are never deleted
    return updated


@router.post("/{name:path}/prewarm", response_model=PrewarmStarted, status_code=status.HTTP_202_ACCEPTED)
async def prewarm(
    name: str, svc: Svc, _caller: Operator, request: Annotated[PrewarmRequest | None, Body()] = None
) -> PrewarmStarted:
    """Start putting the model's weights on the disk of every healthy node that could serve it.

    One PrewarmWorkflow per node, so each transfer retries and reports on its own; the answer
    says which nodes fetch from a peer in their datacenter and which from origin. Nodes that
    already cache the weights, or could never load the model, are left out.
    """
    entry = (await _existing(svc, name)).entry
    nodes = await svc.db(svc.store.fleet.list)
    try:
        targets = prewarm_targets(nodes, entry, request.datacenter if request else None)
    except PrewarmRefused as exc:
        raise invalid(exc.field, exc.message) from None
    started: list[PrewarmTarget] = []
    if not targets:
        return PrewarmStarted(model=name, nodes=started)
    try:
        client = await svc.temporal.client()
        for node_id, source in targets:
            workflow_id = f"prewarm-{name}-{node_id}-{uuid.uuid4().hex[:8]}"
            if source == "datacenter":  # the node may copy from its peers only what it was asked to load
                await svc.db(svc.store.peers.order_weights, node_id, entry.name)
            order = PrewarmOnNode(
                node_id=node_id, request=Prewarm(model=entry, size_bytes=weights_bytes(entry), tier=source)
            )
            await client.start_workflow(
                PREWARM_WORKFLOW,
                order,
                id=workflow_id,
                task_queue=svc.temporal.task_queue,
                rpc_timeout=timedelta(seconds=CONNECT_TIMEOUT_S),
            )
            started.append(PrewarmTarget(node_id=node_id, source=source, workflow_id=workflow_id))
    except (TemporalUnavailable, RPCError, RuntimeError) as exc:
        done = f" (started on {', '.join(t.node_id for t in started)})" if started else ""
        raise unavailable(f"could not start prewarming {name!r}{done}: {exc}") from None
    return PrewarmStarted(model=name, nodes=started)


@router.get("/{name:path}", response_model=CatalogueModel)
async def get_model(name: str, svc: Svc) -> CatalogueModel:
    return await _existing(svc, name)


@router.put(
    "/{name:path}",
    response_model=CatalogueModel,
    status_code=status.HTTP_200_OK,
    responses={201: {"model": CatalogueModel, "description": "a new model was added"}},
)
async def put_model(name: str, entry: ModelEntry, response: Response, svc: Svc, _caller: Operator) -> CatalogueModel:
    """Add a model or replace its entry; an existing model keeps its scaling policy."""
    if entry.name != name:
        raise invalid("name", f"the body names {entry.name!r} but the path names {name!r}")
    unservable = unservable_by_any_gpu(entry)
    if unservable is not None:
        raise invalid("tensor_parallel", unservable)
    existed = await svc.db(svc.store.models.get, name) is not None
    stored = await svc.db(svc.store.models.put, entry)
    svc.catalogue.forget(name)
    if not existed:
        response.status_code = status.HTTP_201_CREATED
    return stored


async def _existing(svc: Services, name: str) -> CatalogueModel:
    found = await svc.db(svc.store.models.get, name)
    if found is None:
        raise not_found(f"model {name!r} is not in the catalogue", field="name")
    return found
