"""Keys, tenants and the audit log in the store: hashing, checking, revoking, the default tenant."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import pytest

from orchestrator.api.limits import KeyRateLimit
from orchestrator.stack.admin_key import ensure_admin_key
from orchestrator.store import Store
from orchestrator.store.keys import hash_secret, split_key
from sdk import Conflict, NotFound, Unauthorized
from sdk.wire.identity import Role, TenantSpec, TenantUpdate, Trust

pytestmark = pytest.mark.postgresql  # the store's SQL must mean the same on SQLite and PostgreSQL


def test_a_key_reads_berth_id_secret_and_only_its_hash_is_kept(store: Store) -> None:
    created = store.keys.create(Role.agent, "default", name="tools")
    key_id, secret = split_key(created.key)  # type: ignore[misc]
    assert key_id == created.key_id and len(secret) >= 43  # 32 bytes, urlsafe base64
    assert hash_secret(secret) == hashlib.sha256(secret.encode()).hexdigest()
    with store.engine.connect() as connection:
        rows = connection.exec_driver_sql("SELECT * FROM api_keys").fetchall()
    assert len(rows) == 1 and secret not in repr(rows) and hash_secret(secret) in repr(rows)
    assert "key" not in store.keys.list()[0].model_dump()


@pytest.mark.parametrize("key", ["", "berth_", "berth_abc", "berth__secret", "token abc", "BERTH_abc_def"])
def test_malformed_keys_do_not_split(key: str) -> None:
    assert split_key(key) is None


def test_a_secret_may_hold_underscores() -> None:
    assert split_key("berth_0a1b_se_cr_et") == ("0a1b", "se_cr_et")


def test_authenticate_knows_the_holder_and_refuses_wrong_unknown_and_revoked_keys(store: Store) -> None:
    created = store.keys.create(Role.operator, None)
    holder = store.keys.authenticate(created.key)
    assert (holder.key_id, holder.role, holder.tenant) == (created.key_id, Role.operator, None)
    assert store.keys.list()[0].last_used_at is not None

    for wrong in (created.key[:-1] + ("A" if created.key[-1] != "A" else "B"), "berth_ffffffffffff_x", "junk"):
        with pytest.raises(Unauthorized):
            store.keys.authenticate(wrong)
    first = store.keys.revoke(created.key_id)
    assert first.revoked_at is not None and store.keys.revoke(created.key_id).revoked_at == first.revoked_at
    with pytest.raises(Unauthorized, match="revoked"):
        store.keys.authenticate(created.key)
    with pytest.raises(NotFound):
        store.keys.revoke("nope")


def test_the_default_tenant_always_exists_and_others_are_made_and_changed(store: Store) -> None:
    assert [t.name for t in store.tenants.list()] == ["default"]
    made = store.tenants.create(TenantSpec(name="acme", trust=Trust.isolated, gpu_quota=8, default_budget_tokens=500))
    assert made.trust == Trust.isolated and made.default_budget_tokens == 500
    with pytest.raises(Conflict):
        store.tenants.create(TenantSpec(name="acme"))
    changed = store.tenants.update("acme", TenantUpdate(gpu_quota=None, default_budget_usd=2.0))
    assert changed.gpu_quota is None and changed.default_budget_usd == 2.0 and changed.default_budget_tokens == 500
    assert changed.updated_at >= made.updated_at
    with pytest.raises(NotFound):
        store.tenants.update("ghost", TenantUpdate(trust=Trust.shared))


def test_audit_rows_are_listed_newest_first_and_by_key(store: Store) -> None:
    for i, key_id in enumerate(["k1", "k2", "k1"]):
        store.audit.record(
            key_id=key_id, role="admin", tenant=None, method="POST", path=f"/v1/x/{i}", target=str(i), status=200
        )
    assert [r.path for r in store.audit.list()] == ["/v1/x/2", "/v1/x/1", "/v1/x/0"]
    assert [r.target for r in store.audit.list(key_id="k1")] == ["2", "0"]
    assert len(store.audit.list(limit=1)) == 1


def test_berth_up_makes_one_admin_key_kept_owner_only_and_reuses_it(store: Store, tmp_path: Path) -> None:
    path = tmp_path / "data" / "admin-key"
    key, created = ensure_admin_key(store, path)
    assert created and path.read_text().strip() == key
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert store.keys.authenticate(key).role == Role.admin
    assert ensure_admin_key(store, path) == (key, False)

    store.keys.revoke(split_key(key)[0])  # type: ignore[index]
    again, created = ensure_admin_key(store, path)
    assert created and again != key and path.read_text().strip() == again


def test_submissions_are_limited_per_key_after_a_burst() -> None:
    limit = KeyRateLimit(per_s=0.001, burst=3)
    assert [limit.take("a") for _ in range(3)] == [None, None, None]
    wait = limit.take("a")
    assert wait is not None and wait > 0
    assert limit.take("b") is None  # another key has its own bucket


def test_a_task_token_works_while_its_task_runs_and_names_it(store: Store) -> None:
    from sdk import Spend, TaskState, TaskStatus

    state = TaskState(
        task_id="t-lead",
        agent="a",
        agent_version="v",
        model="m",
        tenant="default",
        status=TaskStatus.running,
        max_steps=3,
        spend=Spend(token_limit=100),
    )
    store.tasks.create("t-lead", "{}", state)
    token = store.keys.create(Role.agent, "default", name="task t-lead", task_id="t-lead")
    assert token.task_id == "t-lead"
    assert store.keys.authenticate(token.key).task_id == "t-lead"
    store.tasks.save_state(state.model_copy(update={"status": TaskStatus.completed}))
    with pytest.raises(Unauthorized, match="token of task t-lead, which has ended"):
        store.keys.authenticate(token.key)
    orphan = store.keys.create(Role.agent, "default", task_id="t-never-existed")
    with pytest.raises(Unauthorized, match="has ended"):
        store.keys.authenticate(orphan.key)


def test_a_task_tokens_tree_is_its_task_and_the_ids_that_extend_it() -> None:
    from orchestrator.api.principal import Principal, in_tree

    assert in_tree("t-1", "t-1") and in_tree("t-1", "t-1~x.2.0a1b2c3d") and in_tree("t-1", "t-1~s3.1.aa~x.1.bb")
    assert not in_tree("t-1", "t-10") and not in_tree("t-1", "t-2") and not in_tree("t-1~x.1.aa", "t-1")
    # A client-chosen id that extends another's is no sub-agent of it: only the mark, which no client id holds, is.
    assert not in_tree("acme:job", "acme:job.x.1") and not in_tree("acme:job", "acme:jobs")
    token = Principal("k", Role.agent, "default", task_id="t-1")
    assert token.sees_task("t-1~x.1.aa", "default") and not token.sees_task("t-1~x.1.aa", "acme")
    assert not token.sees_task("t-2", "default")
    assert Principal("k", Role.agent, "default").sees_task("t-2", "default")
