"""The audit trail records actions, and an action needs someone who proved who they are: a stranger without a key
(or with a made-up one) cannot grow the log, while every refusal of a key that did authenticate stays on record."""

from __future__ import annotations

import re
import uuid

import httpx

from orchestrator.store import Store
from orchestrator.store.keys import split_key
from sdk.wire.identity import Role


async def test_requests_without_a_valid_key_leave_no_audit_row(app, store: Store) -> None:
    before = store.audit.list(limit=500)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://berth") as stranger:
        for attempt in range(20):
            assert (await stranger.post("/v1/tenants", json={"name": f"sneaky-{attempt}"})).status_code == 401
            made_up = {"authorization": f"Bearer berth_{attempt:012x}_made-up"}
            assert (await stranger.post("/v1/tasks", json={}, headers=made_up)).status_code == 401
            assert (
                await stranger.post("/v1/agents", content=b"x" * (5 * 1024 * 1024), headers=made_up)
            ).status_code == 413
        form = await stranger.get("/login")
        token = re.search(r'name="csrf_token" value="([^"]+)"', form.text).group(1)  # type: ignore[union-attr]
        assert (
            await stranger.post("/login", data={"api_key": "berth_0123456789ab_nope", "csrf_token": token})
        ).status_code == 401
        assert (await stranger.post("/tenants", data={"name": "sneaky"})).status_code == 303  # to /login
    assert store.audit.list(limit=500) == before


async def test_refusals_of_a_key_that_authenticated_stay_on_record(app, store: Store, client_as) -> None:
    viewer = store.keys.create(Role.viewer, name="audited viewer").key
    tenant_key = store.keys.create(Role.agent, "acme", name="audited agent").key
    missing = f"t-{uuid.uuid4().hex[:8]}"
    async with client_as(Role.viewer, key=viewer) as http:
        assert (await http.post("/v1/tenants", json={"name": "nope"})).status_code == 403
    async with client_as(Role.agent, key=tenant_key) as http:
        assert (await http.post(f"/v1/tasks/{missing}/cancel")).status_code == 404
        too_big = await http.post(
            "/v1/agents", content=b"x" * (5 * 1024 * 1024), headers={"content-type": "application/json"}
        )
        assert too_big.status_code == 413  # refused before any route read the key: the trail reads it
        assert (
            await http.post("/v1/tasks", content=b"{not json", headers={"content-type": "application/json"})
        ).status_code == 422
    rows = store.audit.list(limit=4)
    assert [(r.key_id, r.method, r.path, r.status) for r in reversed(rows)] == [
        (split_key(viewer)[0], "POST", "/v1/tenants", 403),  # type: ignore[index]
        (split_key(tenant_key)[0], "POST", f"/v1/tasks/{missing}/cancel", 404),  # type: ignore[index]
        (split_key(tenant_key)[0], "POST", "/v1/agents", 413),  # type: ignore[index]
        (split_key(tenant_key)[0], "POST", "/v1/tasks", 422),  # type: ignore[index]
    ]
    assert [r.tenant for r in reversed(rows)] == [None, "acme", "acme", "acme"]
