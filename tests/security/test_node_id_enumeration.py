"""A stranger without any node's secret maps which node ids exist: it must learn nothing from the answers.

The routes a node calls with its secret (`/v1/nodes/{id}/...`) answered 404 for an id never registered and 401
for a known id with a wrong secret, and named a revoked node as revoked to anyone: a probe of ids read the fleet.
Now all three answer the same 401 in the same words; only the node that held a revoked secret is told it was
revoked (its agent stops on that, instead of joining again).
"""

from __future__ import annotations

import httpx
import pytest

from tests.security.parties import error_of
from tests.security.test_node_admission import SECRET_HEADER, heartbeat, registration

GUESS = "a-secret-the-stranger-made-up"
ROUTES = {
    "heartbeat": lambda node_id: heartbeat(node_id),
    "steps/booked": lambda _node_id: {"lease_id": "lease-guess", "before_attempt": 1},
    "peer-tickets": lambda _node_id: {"model": "llama-3.1-8b"},
}


async def _admit(api: httpx.AsyncClient, node_id: str) -> str:
    token = (await api.post(f"/v1/nodes/{node_id}/admit")).json()["join_token"]
    joined = await api.post("/v1/nodes/register", json=registration(node_id, token))
    assert joined.status_code == 201, joined.text
    return joined.json()["node_secret"]


@pytest.mark.parametrize("route", sorted(ROUTES))
async def test_unknown_known_and_revoked_ids_answer_a_stranger_alike(api: httpx.AsyncClient, route: str) -> None:
    await _admit(api, "gpu-known")
    await _admit(api, "gpu-gone")
    assert (await api.post("/v1/nodes/gpu-gone/revoke")).status_code == 200
    pending = await api.post("/v1/nodes/register", json=registration("gpu-waits"))
    assert pending.json()["node"]["status"] == "pending"

    answers = {}
    for node_id in ("gpu-never", "gpu-known", "gpu-gone", "gpu-waits"):
        for headers in ({SECRET_HEADER: GUESS}, {}):
            answer = await api.post(f"/v1/nodes/{node_id}/{route}", json=ROUTES[route](node_id), headers=headers)
            answers[(node_id, bool(headers))] = (
                answer.status_code,
                {k: str(v).replace(node_id, "ID") for k, v in error_of(answer).items()},
            )
    assert len(set(map(repr, answers.values()))) == 1, answers
    status, error = next(iter(answers.values()))
    assert status == 401 and error["field"] == "node_id"


async def test_the_revoked_nodes_own_secret_is_told_it_was_revoked(api: httpx.AsyncClient) -> None:
    secret = await _admit(api, "gpu-gone")
    await api.post("/v1/nodes/gpu-gone/revoke")
    told = await api.post("/v1/nodes/gpu-gone/heartbeat", json=heartbeat("gpu-gone"), headers={SECRET_HEADER: secret})
    assert told.status_code == 401 and error_of(told)["code"] == "revoked"
    assert "revoked" in error_of(told)["message"]
