"""Pool tokens: how the GPU nodes of an autoscaled pool join without a person.

A node pool that Karpenter or the cluster autoscaler grows gets machines nobody named in advance, so a
per-node token (`berth nodes admit NODE_ID`) cannot be minted for them, and the cluster token leaves each
one waiting for an approval. A pool token is the operator's word for a whole pool, given once: a node that
joins with it is admitted at once, in that pool and with the trust labels the operator set on the token,
and gets its own node secret, so it is revoked alone like any other node. What bounds a leaked copy is on
the token: how many of its nodes the fleet holds at once (`max_nodes`), until when (`expires_at`), and
revocation.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from .fleet import NodeTrust
from .limits import NAME_PATTERN, numbers_not_booleans

# A day unless the operator says otherwise: a pool grows for as long as its token lives, so it should be
# rotated on a schedule. A minute at least (a node takes that long to start); 30 days at most
# (30 × 86,400 = 2,592,000 s: a monthly rotation, never a credential that outlives its operator's memory).
DEFAULT_POOL_TOKEN_TTL_S = 86_400
MIN_POOL_TOKEN_TTL_S = 60
MAX_POOL_TOKEN_TTL_S = 30 * 86_400
# How many of its nodes the fleet may hold at once: 1 to 10,000 (beyond any one Kubernetes node pool; a
# cluster's documented ceiling is 5,000 nodes in all). The default, 16, keeps a leaked copy small.
DEFAULT_POOL_MAX_NODES = 16
MAX_POOL_MAX_NODES = 10_000
POOL_PATTERN = NAME_PATTERN  # typed and grepped like a node id: "gpu-h100", "karpenter.a100"


class PoolTokenRequest(BaseModel):
    """Mint a pool token: how many nodes it may bring in, for how long, and whom they serve."""

    model_config = ConfigDict(extra="forbid")

    max_nodes: int = Field(
        default=DEFAULT_POOL_MAX_NODES,
        ge=1,
        le=MAX_POOL_MAX_NODES,
        description="how many of its nodes the fleet may hold at once; a removed node frees its place",
    )
    ttl_s: int = Field(
        default=DEFAULT_POOL_TOKEN_TTL_S,
        ge=MIN_POOL_TOKEN_TTL_S,
        le=MAX_POOL_TOKEN_TTL_S,
        description="seconds until the token admits no one; nodes that joined stay",
    )
    trust: NodeTrust = Field(
        default_factory=NodeTrust, description="the trust labels its nodes get (dedicated: the one tenant they serve)"
    )

    _numbers = numbers_not_booleans("max_nodes", "ttl_s")


class PoolTokenView(BaseModel):
    """A pool token as listed: never its secret (only its sha256 is kept)."""

    token_id: str
    pool: str
    max_nodes: int
    nodes: int = Field(description="its nodes the fleet holds now (revoked ones included): places taken")
    labels: dict[str, str] = Field(default_factory=dict, description="the trust labels its nodes get")
    created_by: str | None = None
    created_at: datetime
    expires_at: datetime
    revoked_at: datetime | None = None


class PoolToken(PoolTokenView):
    """A pool token as minted: the one time its secret is shown. Nodes present it as their join token
    (`berth node --join-token`, or BERTH_JOIN_TOKEN, e.g. from a Kubernetes Secret)."""

    join_token: str
