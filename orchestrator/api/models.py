"""Model catalogue routes: list and read models, add or edit one, set its scaling policy."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Response, status

from sdk._catalogue import CatalogueModel, ModelEntry, ScalingPolicy

from .errors import ERROR_RESPONSES, invalid, not_found
from .services import Services, services

router = APIRouter(prefix="/v1/models", tags=["models"], responses=ERROR_RESPONSES)
Svc = Annotated[Services, Depends(services)]


@router.get("", response_model=list[CatalogueModel])
async def list_models(svc: Svc) -> list[CatalogueModel]:
    return await svc.db(svc.store.models.list)


@router.get("/{name:path}/policy", response_model=ScalingPolicy)
async def get_policy(name: str, svc: Svc) -> ScalingPolicy:
    return (await _existing(svc, name)).policy


@router.put("/{name:path}/policy", response_model=CatalogueModel)
async def set_policy(name: str, policy: ScalingPolicy, svc: Svc) -> CatalogueModel:
    """Replace the model's scaling policy (min/max replicas, idle window, scaler, warm buffer)."""
    await _existing(svc, name)
    updated = await svc.db(svc.store.models.set_policy, name, policy)
    assert updated is not None  # checked just above; models are never deleted
    return updated


@router.get("/{name:path}", response_model=CatalogueModel)
async def get_model(name: str, svc: Svc) -> CatalogueModel:
    return await _existing(svc, name)


@router.put("/{name:path}", response_model=CatalogueModel, status_code=status.HTTP_200_OK,
            responses={201: {"model": CatalogueModel, "description": "a new model was added"}})
async def put_model(name: str, entry: ModelEntry, response: Response, svc: Svc) -> CatalogueModel:
    """Add a model or replace its entry; an existing model keeps its scaling policy."""
    if entry.name != name:
        raise invalid("name", f"the body names {entry.name!r} but the path names {name!r}")
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
