"""Pool tokens: operators let the GPU nodes of one pool (a Karpenter or cluster-autoscaler node pool) join
without a person, through a token the control plane checks (store/node_pools.py).

Minting and revoking are an operator's or an admin's of no tenant, as admitting a node is, and are in the audit
log; a tenant's key gets 403, since a pool token brings machines into every tenant's fleet. Listing shows no
secret: only the token's sha256 is kept, and the answer to its minting is the one place the token appears.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Path, Query, Request, status

from sdk import NotFound
from sdk.wire.node_pools import POOL_PATTERN, PoolToken, PoolTokenRequest, PoolTokenView

from .audit import note_target
from .auth import FleetReader, Operator
from .errors import ERROR_RESPONSES, not_found
from .services import Svc

router = APIRouter(tags=["fleet"], responses=ERROR_RESPONSES)
Pool = Annotated[str, Path(pattern=POOL_PATTERN, description="the node pool, e.g. gpu-h100")]


@router.post("/v1/node-pools/{pool}/tokens", status_code=status.HTTP_201_CREATED, response_model=PoolToken)
async def create_pool_token(
    pool: Pool,
    svc: Svc,
    caller: Operator,
    http: Request,
    req: Annotated[PoolTokenRequest | None, Body()] = None,
) -> PoolToken:
    """A pool token: each node that joins with it is admitted at once into `pool`, with the token's trust labels,
    while fewer than `max_nodes` of its nodes are in the fleet and until it expires or is revoked."""
    token = await svc.db(svc.store.node_pools.create, pool, req or PoolTokenRequest(), caller.key_id)
    note_target(http.scope, token.token_id)
    return token


@router.get("/v1/node-pools/tokens", response_model=list[PoolTokenView])
async def list_pool_tokens(
    svc: Svc, _caller: FleetReader, pool: Annotated[str | None, Query(pattern=POOL_PATTERN)] = None
) -> list[PoolTokenView]:
    """Every pool token (or one pool's): its cap, places taken, expiry and revocation; never its secret."""
    return await svc.db(svc.store.node_pools.list, pool)


@router.post("/v1/node-pools/tokens/{token_id}/revoke", response_model=PoolTokenView)
async def revoke_pool_token(
    token_id: Annotated[str, Path(max_length=64)], svc: Svc, _caller: Operator
) -> PoolTokenView:
    """No node joins with the token any more. The nodes that joined keep their own secrets: each is revoked alone
    (`POST /v1/nodes/{id}/revoke`)."""
    try:
        return await svc.db(svc.store.node_pools.revoke, token_id)
    except NotFound as exc:
        raise not_found(exc.message, field=exc.field) from None
