"""The admin UI over HTTP, in-process: sign-in, sessions, CSRF, roles, tenants, escaping and the audit trail.

What a browser does is in tests/browser; these check the server's side of each rule directly,
including the requests no page would send (forged forms, other tenants' ids, revoked keys).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from api_helpers import put_task, unique, write_checkpoints
from ui_helpers import SignIn, csrf_of, flash_of

from activities.step.store_books import StoreStepBooks
from orchestrator.store import Store
from orchestrator.ui.login import ADDRESS_FAILED_LOGIN_BURST
from sdk import AgentSpec, TaskSpec
from sdk.wire.catalogue import KeepAliveView, ModelForesight, PrewarmView
from sdk.wire.identity import Role, TenantSpec
from sdk.wire.lease import StepPlacement
from sdk.wire.step_call import CallReport, StepRef


async def test_pages_need_a_session_and_send_you_back_after_signing_in(app, store: Store, browsers) -> None:
    browser = httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://berth")
    browsers.append(browser)
    for path in ("/", "/tasks", "/fleet", "/models", "/tenants", "/audit", "/tasks/anything"):
        refused = await browser.get(path)
        assert refused.status_code == 303 and refused.headers["location"].startswith("/login"), path
    sent_away = await browser.get("/tasks?status=running")
    assert sent_away.headers["location"] == "/login?next=/tasks%3Fstatus%3Drunning"
    form = await browser.get("/login?next=/tasks%3Fstatus%3Drunning")
    key = store.keys.create(Role.viewer, name="back").key
    signed = await browser.post(
        "/login", data={"api_key": key, "csrf_token": csrf_of(form), "next": "/tasks?status=running"}
    )
    assert signed.headers["location"] == "/tasks?status=running"
    cookie = signed.headers["set-cookie"]
    assert cookie.startswith("berth_session=") and "HttpOnly" in cookie and "SameSite=strict" in cookie
    secret = key.split("_", 2)[2]  # berth_<id>_<secret>: the secret itself may hold an underscore
    assert key not in cookie and secret not in cookie  # the cookie is a session, not the key
    assert (await browser.get("/tasks")).status_code == 200


@pytest.mark.parametrize("next_path", ["//evil.example/x", "https://evil.example/", "/\\evil.example"])
async def test_signing_in_never_sends_you_to_another_site(app, store: Store, browsers, next_path: str) -> None:
    browser = httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://berth")
    browsers.append(browser)
    form = await browser.get("/login")
    signed = await browser.post(
        "/login", data={"api_key": store.keys.create(Role.viewer).key, "csrf_token": csrf_of(form), "next": next_path}
    )
    assert signed.headers["location"] == "/"


async def test_a_wrong_key_a_revoked_key_or_a_forged_sign_in_gets_no_session(app, store: Store, browsers) -> None:
    browser = httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://berth")
    browsers.append(browser)
    form = await browser.get("/login")
    token = csrf_of(form)
    wrong = await browser.post("/login", data={"api_key": "berth_0123456789ab_nope", "csrf_token": token})
    assert wrong.status_code == 401 and "berth_session" not in wrong.headers.get("set-cookie", "")
    assert flash_of(wrong).startswith("error: api_key:")
    revoked = store.keys.create(Role.admin, name="gone")
    store.keys.revoke(revoked.key_id)
    refused = await browser.post("/login", data={"api_key": revoked.key, "csrf_token": token})
    assert refused.status_code == 401 and "revoked" in flash_of(refused)
    # A page of another site posting a good key into this form has no login CSRF cookie to match.
    forger = httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://berth")
    browsers.append(forger)
    forged = await forger.post("/login", data={"api_key": store.keys.create(Role.admin).key, "csrf_token": token})
    assert forged.status_code == 403 and "berth_session" not in forged.headers.get("set-cookie", "")


async def test_revoking_the_key_ends_its_sessions(sign_in: SignIn, store: Store) -> None:
    key = store.keys.create(Role.operator, name="soon revoked")
    browser = await sign_in(key=key.key)
    assert (await browser.get("/fleet")).status_code == 200
    store.keys.revoke(key.key_id)
    assert (await browser.get("/fleet")).status_code == 303


async def test_signing_out_ends_the_session(sign_in: SignIn) -> None:
    browser = await sign_in(Role.viewer)
    page = await browser.get("/")
    cookie = browser.cookies["berth_session"]
    out = await browser.post("/logout", data={"csrf_token": csrf_of(page)})
    assert out.status_code == 303 and out.headers["location"] == "/login"
    browser.cookies.set("berth_session", cookie)  # even a copy of the old cookie is worthless now
    assert (await browser.get("/")).status_code == 303


async def test_failed_sign_ins_are_rate_limited_per_address(app, store: Store, browsers) -> None:
    browser = httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://berth")
    browsers.append(browser)
    token = csrf_of(await browser.get("/login"))
    for i in range(ADDRESS_FAILED_LOGIN_BURST):
        wrong = await browser.post("/login", data={"api_key": f"berth_{i:012x}_guess", "csrf_token": token})
        assert wrong.status_code == 401
    good = store.keys.create(Role.admin).key
    limited = await browser.post("/login", data={"api_key": good, "csrf_token": token})
    assert limited.status_code == 429 and "too many failed sign-ins" in flash_of(limited)


async def test_a_form_without_the_sessions_csrf_token_changes_nothing(sign_in: SignIn, store: Store) -> None:
    admin = await sign_in(Role.admin)
    before = store.models.get("llama-3.2-1b")
    for token in (None, "forged", csrf_of(await (await sign_in(Role.admin)).get("/models"))):  # another session's
        data = {"min_replicas": "3", "max_replicas": "4"} | ({"csrf_token": token} if token else {})
        refused = await admin.post("/models/llama-3.2-1b/policy", data=data)
        assert refused.status_code == 403 and "CSRF" in refused.text
    assert store.models.get("llama-3.2-1b") == before


async def test_a_viewer_sees_disabled_buttons_and_a_forged_press_is_refused(sign_in: SignIn, store: Store) -> None:
    viewer = await sign_in(Role.viewer)
    page = await viewer.get("/models")
    assert re.search(r'<button type="submit" disabled title="your role \(viewer\) may not', page.text)
    before = store.models.get("llama-3.2-1b")
    refused = await viewer.post(
        "/models/llama-3.2-1b/policy", data={"min_replicas": "2", "max_replicas": "4", "csrf_token": csrf_of(page)}
    )
    assert refused.status_code == 403 and "viewer" in refused.text
    assert store.models.get("llama-3.2-1b") == before
    assert (await viewer.get("/tenants")).status_code == 403
    assert 'href="/tenants"' not in page.text  # admin pages are not even offered


async def test_a_scaling_policy_is_validated_and_saved_from_its_form(sign_in: SignIn, store: Store) -> None:
    operator = await sign_in(Role.operator)
    page = await operator.get("/models")
    before = store.models.get("llama-3.1-8b")
    bad = await operator.post(
        "/models/llama-3.1-8b/policy",
        data={
            "csrf_token": csrf_of(page),
            "min_replicas": "5",
            "max_replicas": "2",
            "idle_timeout_s": "60",
            "scaler": "queue_delay",
            "target": "2",
            "warm_buffer": "0",
        },
    )
    assert bad.status_code == 422 and "min_replicas (5) is above max_replicas (2)" in flash_of(bad)
    form = re.search(r'<form class="policy" data-model="llama-3.1-8b".*?</form>', bad.text, re.S)
    assert form and 'name="min_replicas" value="5"' in form.group(0)  # shown as typed, to fix
    assert store.models.get("llama-3.1-8b") == before
    good = await operator.post(
        "/models/llama-3.1-8b/policy",
        data={
            "csrf_token": csrf_of(page),
            "min_replicas": "1",
            "max_replicas": "3",
            "idle_timeout_s": "120",
            "scaler": "request_count",
            "target": "4",
            "warm_buffer": "1",
            "intent_gpu_hours_per_hour": "0.5",
        },
    )
    assert good.status_code == 303
    saved = store.models.get("llama-3.1-8b")
    assert saved is not None and (saved.policy.min_replicas, saved.policy.scaler) == (1, "request_count")
    assert (saved.policy.idle_timeout_s, saved.policy.intent_gpu_hours_per_hour) == (120, 0.5)
    shown = await operator.get("/models")
    assert flash_of(shown) == "ok: scaling policy of llama-3.1-8b saved"
    form = re.search(r'<form class="policy" data-model="llama-3.1-8b".*?</form>', shown.text, re.S)
    assert form and 'name="idle_timeout_s" value="120.0"' in form.group(0)
    assert 'name="intent_gpu_hours_per_hour" value="0.5"' in form.group(0)
    bad_intent = await operator.post(
        "/models/llama-3.1-8b/policy",
        data={"csrf_token": csrf_of(page), "min_replicas": "1", "max_replicas": "3", "intent_gpu_hours_per_hour": "-1"},
    )
    assert bad_intent.status_code == 422 and flash_of(bad_intent).startswith("error: intent_gpu_hours_per_hour: ")
    # The idle timeout left empty goes back to the window learned from the model's own idle gaps.
    learned = await operator.post(
        "/models/llama-3.1-8b/policy",
        data={
            "csrf_token": csrf_of(page),
            "min_replicas": "1",
            "max_replicas": "3",
            "idle_timeout_s": "",
            "scaler": "request_count",
            "target": "4",
            "warm_buffer": "1",
            "intent_gpu_hours_per_hour": "0.5",
        },
    )
    assert learned.status_code == 303
    saved = store.models.get("llama-3.1-8b")
    assert saved is not None and (saved.policy.idle_timeout_s, saved.policy.intent_gpu_hours_per_hour) == (None, 0.5)
    form = re.search(
        r'<form class="policy" data-model="llama-3.1-8b".*?</form>', (await operator.get("/models")).text, re.S
    )
    assert form and 'name="idle_timeout_s" value="" placeholder="learned"' in form.group(0)


def _model_section(page: str, name: str) -> str:
    section = page[page.index(f'<section class="model" data-model="{name}">') :]
    return section[: section.index("</section>")]


async def test_the_models_page_shows_the_learned_keep_alive_and_whether_each_prewarm_was_used(
    sign_in: SignIn, store: Store
) -> None:
    now = datetime.now(UTC)
    store.models.publish_foresight(
        {
            "qwen2.5-7b": ModelForesight(
                keep_alive=[
                    KeepAliveView(level=2, window_s=2400, prewarm_s=900, source="learned", gaps=40),
                    KeepAliveView(level=1, window_s=720, prewarm_s=0, source="learned", gaps=254),
                ],
                prewarms=[
                    PrewarmView(
                        replica_id="r-used",
                        started_at=now - timedelta(minutes=10),
                        reason="2 announced steps <b>soon</b>",
                        used_at=now - timedelta(minutes=9),
                    ),
                    PrewarmView(
                        replica_id="r-wasted",
                        started_at=now - timedelta(minutes=30),
                        reason="level 2 pre-warm",
                        ended_at=now - timedelta(minutes=15),
                    ),
                ],
                announced=3,
                intent_gpu_hours_last_hour=0.5,
                slo_attainment=0.9,
                slo_target=0.99,
                updated_at=now,
            )
        }
    )
    page = (await (await sign_in(Role.viewer)).get("/models")).text
    learned = _model_section(page, "qwen2.5-7b")
    shown = dict(re.findall(r'<b class="([\w-]+)">([^<]*)</b>', learned))
    assert {k: shown[k] for k in ("unload-after", "announced", "intent-used", "intent-allowed")} == {
        "unload-after": "~12 min",
        "announced": "3",
        "intent-used": "0.50",
        "intent-allowed": "2",
    }
    assert shown["slo-attainment"] == "90.0% of recent grants predicted within their latency objectives (target 99.0%)"
    assert '<p class="facts slo below-target">' in learned
    assert "(learned from its idle gaps)" in learned
    levels = re.findall(
        r'<tr class="level" data-level="(\d+)" data-source="(\w+)"><td>\d+</td>\s*'
        r'<td class="kept">([^<]*)</td><td class="prewarm-at">([^<]*)</td><td class="source">([^<]*)</td>',
        learned,
    )
    assert levels == [
        ("1", "learned", "12 min idle", "–", "learned from 254 idle gaps"),
        (
            "2",
            "learned",
            "unloaded at once, then kept until 40 min idle",
            "at 15 min idle",
            "learned from 40 idle gaps",
        ),
    ]
    prewarms = re.findall(
        r'<tr class="prewarm" data-replica-id="([\w-]+)" data-used="([\w-]+)">.*?'
        r'<td class="prewarm-used">([^<]*)</td>',
        learned,
        re.S,
    )
    assert prewarms == [("r-used", "yes", "yes, 60 s after it started"), ("r-wasted", "no", "no: ended unused")]
    assert "2 announced steps &lt;b&gt;soon&lt;/b&gt;" in learned  # a reason is text, never markup
    assert 'name="idle_timeout_s" value=""' in learned and "None" not in learned
    unplanned = _model_section(page, "llama-3.1-8b")
    assert "the scaler has not planned for this model yet" in unplanned and 'class="prewarms"' not in unplanned
    assert "a window not learned yet" in unplanned
    # A provider's model is never loaded here, nor kept alive: a summary row, no plan, no policy, no prewarm.
    assert '<section class="model" data-model="openai/gpt-4o-mini">' not in page
    hosted = re.search(r'<tr data-model="openai/gpt-4o-mini" class="hosted">.*?</tr>', page, re.S)
    assert hosted and "Prewarm" not in hosted.group(0) and "GiB" not in hosted.group(0)


async def test_what_users_and_models_wrote_is_shown_escaped(sign_in: SignIn, store: Store, agent: AgentSpec) -> None:
    script = '<script>alert("x")</script><img src=x onerror=alert(1)>'
    task = put_task(store, agent, result=script, question=script)
    spec = TaskSpec(task_id=task.task_id, agent=agent.name, input=script, budget={"tokens": 5000})
    store.tasks.save_state(task, spec.model_dump_json())
    write_checkpoints(store, task.task_id)
    admin = await sign_in(Role.admin)
    for path in (f"/tasks/{task.task_id}", f"/tasks/{task.task_id}/panel", "/tasks"):
        page = await admin.get(path)
        assert page.status_code == 200
        assert "<script>alert" not in page.text and "<img src=x" not in page.text, path
    page = await admin.get(f"/tasks/{task.task_id}")
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;" in page.text
    assert "script-src 'self'" in page.headers["content-security-policy"]


async def test_another_tenants_task_is_not_found_in_the_ui_either(
    sign_in: SignIn, store: Store, agent: AgentSpec
) -> None:
    tenant = store.tenants.create(TenantSpec(name=unique("acme"))).name
    other = put_task(store, agent)  # tenant "default"
    write_checkpoints(store, other.task_id)
    confined = await sign_in(Role.operator, tenant=tenant)
    for path in (
        f"/tasks/{other.task_id}",
        f"/tasks/{other.task_id}/panel",
        f"/tasks/{other.task_id}/live",
        f"/tasks/{other.task_id}/checkpoints/0",
    ):
        assert (await confined.get(path)).status_code == 404, path
    listing = await confined.get("/tasks?tenant=default")
    assert other.task_id not in listing.text
    assert other.task_id not in (await confined.get("/")).text
    page = await confined.get("/fleet")
    refused = await confined.post(f"/tasks/{other.task_id}/cancel", data={"csrf_token": csrf_of(page)})
    assert refused.status_code == 404


async def test_ui_actions_are_in_the_audit_log_and_keys_are_shown_once(sign_in: SignIn, store: Store) -> None:
    admin = await sign_in(Role.admin)
    page = await admin.get("/tenants")
    created = await admin.post("/keys", data={"csrf_token": csrf_of(page), "role": "viewer", "name": "for-ops"})
    assert created.status_code == 201
    key = re.search(r'<pre id="new-key">(berth_[^<]+)</pre>', created.text).group(1)  # type: ignore[union-attr]
    assert store.keys.authenticate(key).role == Role.viewer
    secret = key.split("_", 2)[2]
    for path in ("/tenants", "/audit", "/"):
        assert secret not in (await admin.get(path)).text
    key_id = key.split("_")[1]
    revoked = await admin.post(f"/keys/{key_id}/revoke", data={"csrf_token": csrf_of(page)})
    assert revoked.status_code == 303
    entries = store.audit.list(limit=10)
    assert [(e.method, e.path, e.status) for e in entries[:2]] == [
        ("POST", f"/keys/{key_id}/revoke", 303),
        ("POST", "/keys", 201),
    ]
    assert entries[0].role == "admin" and entries[0].key_id is not None
    assert any(e.path == "/login" and e.status == 303 for e in entries)


async def test_every_form_on_every_page_carries_the_sessions_csrf_token(
    sign_in: SignIn, store: Store, agent: AgentSpec
) -> None:
    task = put_task(store, agent, question="Which report?")
    write_checkpoints(store, task.task_id)
    admin = await sign_in(Role.admin)
    token = csrf_of(await admin.get("/"))
    for path in (
        "/",
        "/tasks",
        f"/tasks/{task.task_id}",
        f"/tasks/{task.task_id}/checkpoints/1",
        "/fleet",
        "/models",
        "/tenants",
        "/audit",
    ):
        page = await admin.get(path)
        forms = re.findall(r"<form[^>]*method=\"post\".*?</form>", page.text, re.S)
        assert forms, path
        for form in forms:
            assert f'name="csrf_token" value="{token}"' in form, (path, form[:300])
    detail = (await admin.get(f"/tasks/{task.task_id}")).text
    assert {"raise-budget", "cancel", "answer"} <= set(re.findall(r'<form[^>]* id="([\w-]+)"', detail))


async def test_an_operator_confined_to_a_tenant_may_not_change_what_every_tenant_shares(
    sign_in: SignIn, store: Store
) -> None:
    tenant = store.tenants.create(TenantSpec(name=unique("acme"))).name
    confined = await sign_in(Role.operator, tenant=tenant)
    page = await confined.get("/models")
    assert f"your key is confined to tenant {tenant}" in page.text
    before = store.models.get("llama-3.2-1b")
    refused = await confined.post(
        "/models/llama-3.2-1b/policy", data={"min_replicas": "1", "max_replicas": "2", "csrf_token": csrf_of(page)}
    )
    assert refused.status_code == 403 and "every tenant shares it" in refused.text
    assert store.models.get("llama-3.2-1b") == before


async def test_the_models_page_shows_each_models_last_hour_from_its_booked_calls(sign_in: SignIn, store: Store) -> None:
    """The same settle that feeds berth_step_ttft_seconds writes the calls this page counts."""
    books = StoreStepBooks(store.checkpoints, store.tasks, store.events, store.ledger)
    served = StepRef("t-served", 1, "qwen2.5-7b", "default")
    for attempt, (ttft, tier) in enumerate(((9.0, "origin"), (0.12, "warm"), (0.3, "warm")), start=1):
        placement = StepPlacement(node_id="n", replica_id="r", gpu_indexes=[0], tier=tier)
        books.settle(
            served,
            CallReport(
                attempt=attempt,
                prompt_tokens=20,
                completion_tokens=40,
                cost_usd=0,
                ttft_s=ttft,
                duration_s=1.0,
                served_by="n/r",
                placement=placement,
            ),
        )
    page = (await (await sign_in(Role.viewer)).get("/models")).text
    row = re.search(r'<tr data-model="qwen2.5-7b" class="self-hosted">.*?</tr>', page, re.S)
    assert row, "the model has a row in the summary"
    shown = dict(re.findall(r'<(?:td|span) class="([\w-]+)">([^<]*)</(?:td|span)>', row.group(0)))
    assert {k: shown[k] for k in ("calls", "cold-starts", "ttft-p50", "ttft-p95", "speed")} == {
        "calls": "3",
        "cold-starts": "1",
        "ttft-p50": "300 ms",
        "ttft-p95": "9.0 s",
        "speed": "40 tok/s",
    }
    idle = re.search(r'<tr data-model="llama-3.1-8b" class="self-hosted">.*?</tr>', page, re.S)
    assert idle and re.search(r'<td class="calls">0</td>.*?<span class="ttft-p50">–</span>', idle.group(0), re.S)


async def test_the_fleet_page_shows_pending_and_revoked_nodes_and_revoking_needs_the_node_id_typed(
    sign_in: SignIn, store: Store
) -> None:
    from sdk.wire.fleet import NodeSpec

    store.node_admission.join(
        NodeSpec(node_id="gpu-p", datacenter="dc1", zone="z1"), None, "cluster", cluster_token=True
    )
    viewer = await (await sign_in(Role.viewer)).get("/fleet")
    assert re.search(
        r'action="/fleet/nodes/gpu-p/approve"[^>]*>\s*<input[^>]*>\s*<button type="submit" disabled', viewer.text
    )  # shown, greyed out: a viewer may not approve
    admin = await sign_in(Role.admin)
    page = await admin.get("/fleet")
    assert "joined with the cluster token: no work until approved" in page.text
    approved = await admin.post("/fleet/nodes/gpu-p/approve", data={"csrf_token": csrf_of(page)})
    assert approved.status_code == 303 and store.fleet.get("gpu-p").status == "healthy"
    page = await admin.get("/fleet")
    assert 'action="/fleet/nodes/gpu-p/approve"' not in page.text and 'name="confirm"' in page.text
    for typed in ({}, {"confirm": "gpu-q"}):  # one click, or another node's id, revokes nothing
        refused = await admin.post("/fleet/nodes/gpu-p/revoke", data={"csrf_token": csrf_of(page), **typed})
        assert refused.status_code == 422 and "type the node id 'gpu-p' to confirm" in flash_of(refused)
    assert store.fleet.get("gpu-p").status == "healthy"
    revoked = await admin.post("/fleet/nodes/gpu-p/revoke", data={"csrf_token": csrf_of(page), "confirm": "gpu-p"})
    assert revoked.status_code == 303 and store.fleet.get("gpu-p").status == "revoked"
    assert "its credential is dead" in (await admin.get("/fleet")).text


async def test_the_fleet_page_names_a_nodes_pool_and_dedication_and_marks_claimed_replicas(
    sign_in: SignIn, store: Store
) -> None:
    """What an operator set (the pool a token admitted the node into, its dedication) is shown with the node; a
    replica the node lists that no pool started is marked as the claim it is."""
    from sdk.wire.fleet import NodeHeartbeat, NodeSpec, NodeTrust
    from sdk.wire.node_pools import PoolTokenRequest

    token = store.node_pools.create("gpu-h100", PoolTokenRequest(max_nodes=2, trust=NodeTrust(dedicated="acme")))
    gpus = [{"index": 0, "type_name": "H100-80GB", "memory_total_mib": 81559}]
    spec = NodeSpec.model_validate({"node_id": "gpu-k", "datacenter": "dc1", "zone": "z1", "gpus": gpus})
    joined = store.node_admission.join(spec, None, token.join_token, cluster_token=False)
    claimed = {"replica_id": "r-said", "model": "llama-3.1-8b", "gpu_indexes": [0], "state": "warm"}
    store.fleet.heartbeat(NodeHeartbeat.model_validate({"node_id": "gpu-k", "replicas": [claimed]}), joined.node_secret)
    page = (await (await sign_in(Role.viewer)).get("/fleet")).text
    node = re.search(r'<tr class="node" data-node-id="gpu-k">.*?</tr>', page, re.S)
    assert node and "pool gpu-h100 · dedicated to acme" in node.group(0)
    replica = re.search(r'<tr data-replica-id="r-said">.*?</tr>', page, re.S)
    assert replica and "claimed, unproven" in replica.group(0)


async def test_prewarm_from_the_models_page_is_an_operators_and_says_why_it_did_nothing(sign_in: SignIn) -> None:
    viewer = await sign_in(Role.viewer)
    page = await viewer.get("/models")
    button = re.search(
        r'<form method="post" action="/models/qwen2.5-7b/prewarm" class="prewarm quiet">.*?</form>', page.text, re.S
    )
    assert button and "disabled" in button.group(0)  # shown, greyed out: a viewer may not prewarm
    refused = await viewer.post("/models/qwen2.5-7b/prewarm", data={"csrf_token": csrf_of(page)})
    assert refused.status_code == 403

    operator = await sign_in(Role.operator)
    page = await operator.get("/models")
    nowhere = await operator.post("/models/qwen2.5-7b/prewarm", data={"csrf_token": csrf_of(page)})
    assert nowhere.status_code == 303  # no node has joined: nothing fetched, and the flash says so
    assert (
        flash_of(await operator.get("/models"))
        == "ok: qwen2.5-7b: nothing to fetch: no healthy node that could serve it is missing its weights"
    )
    hosted = await operator.post("/models/openai/gpt-4o-mini/prewarm", data={"csrf_token": csrf_of(page)})
    assert hosted.status_code == 422
    assert flash_of(hosted) == "error: openai/gpt-4o-mini is served by its provider; it has no weights to prewarm"
