"""BERTH_ADMIN_KEY: `berth server` makes sure of the deployment's first admin key at start-up.

A "start" here is what `berth server` does before it listens: `create_app` over the store, with the
real API app called in-process (httpx's ASGI transport; Temporal at a closed port, which /v1/keys never
reaches). Runs on SQLite and PostgreSQL: several server replicas share one PostgreSQL database, and the
race between two of them inserting the same key must end well on both.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest
from pydantic import SecretStr

from orchestrator.api import TemporalGateway
from orchestrator.api.admin_key import ADMIN_KEY_ENV, AdminKeyRefused, install_admin_key
from orchestrator.config import BerthConfig
from orchestrator.server import create_app
from orchestrator.store import KeyConflict, Store
from orchestrator.store.keys import hash_secret
from sdk.wire.identity import Role

pytestmark = pytest.mark.postgresql

ROOT = Path(__file__).resolve().parents[2]


def new_key() -> tuple[str, str, str]:
    """(whole key, key id, secret), made the way the docs tell an operator to."""
    key_id, secret = secrets.token_hex(6), secrets.token_urlsafe(32)
    return f"berth_{key_id}_{secret}", key_id, secret


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(tmp_path: Path, store: Store, admin_key: str):
    config = BerthConfig(data_dir=tmp_path, admin_key=SecretStr(admin_key))
    return create_app(config, store, TemporalGateway(f"127.0.0.1:{closed_port()}"))


async def list_keys(app, key: str) -> httpx.Response:
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app), base_url="http://berth", headers={"authorization": f"Bearer {key}"}
    ) as http:
        return await http.get("/v1/keys")


async def test_the_first_start_stores_the_key_and_it_calls_the_api_as_admin(tmp_path: Path, store: Store) -> None:
    key, key_id, secret = new_key()
    app = start_server(tmp_path, store, key)
    answer = await list_keys(app, key)
    assert answer.status_code == 200, answer.text
    (listed,) = [k for k in answer.json() if k["key_id"] == key_id]
    assert listed["role"] == "admin" and listed["name"] == ADMIN_KEY_ENV and "secret_sha256" not in listed
    assert store.keys.authenticate(key).role.value == "admin"


async def test_a_second_start_changes_nothing(tmp_path: Path, store: Store, db_url: str) -> None:
    key, key_id, _ = new_key()
    assert install_admin_key(store, SecretStr(key)) is True
    before = store.keys.list()
    # A restarted server: a new process, a new Store on the same database.
    again = Store.open(db_url)
    try:
        assert install_admin_key(again, SecretStr(key)) is False
        start_server(tmp_path, again, key)
    finally:
        again.close()
    assert store.keys.list() == before
    assert [k.key_id for k in before].count(key_id) == 1


def test_replicas_starting_together_all_start_and_store_the_key_once(store: Store, db_url: str) -> None:
    key, key_id, _ = new_key()
    replicas = [Store.open(db_url) for _ in range(4)]
    together = threading.Barrier(len(replicas))
    made: list[bool] = []
    failed: list[BaseException] = []

    def start(replica: Store) -> None:
        together.wait()
        try:
            made.append(install_admin_key(replica, SecretStr(key)))
        except BaseException as exc:  # the assertion below reports it
            failed.append(exc)

    threads = [threading.Thread(target=start, args=(r,)) for r in replicas]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
    finally:
        for r in replicas:
            r.close()
    assert not failed and sorted(made) == [False, False, False, True]
    assert [k.key_id for k in store.keys.list()].count(key_id) == 1


def test_the_insert_that_loses_the_race_reads_the_winners_row(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    # Deterministically what the threads above may or may not hit: the key is absent when this replica
    # looks, and present (another replica's insert) when it inserts.
    key, key_id, secret = new_key()
    install_admin_key(store, SecretStr(key))
    real_get, looks = store.keys._get, []

    def get(kid: str):
        looks.append(kid)
        return None if len(looks) == 1 else real_get(kid)

    monkeypatch.setattr(store.keys, "_get", get)
    view, created = store.keys.install(key_id, secret, Role.admin)
    assert not created and view.key_id == key_id and len(looks) == 2
    with pytest.raises(KeyConflict, match="different secret"):  # and the loser's check still holds
        looks.clear()
        store.keys.install(key_id, secrets.token_urlsafe(32), Role.admin)


@pytest.mark.parametrize(
    "value, reason",
    [
        ("not-a-key", "malformed"),
        ("berth_0123456789ab", "malformed"),
        ("berth_XYZ_" + "a" * 43, "key id"),
        ("berth_0123456789AB_" + "a" * 43, "key id"),
        ("berth_0123456789ab_" + "a" * 20 + "!" * 23, "may hold only"),
        ("berth_0123456789ab_short-secret", "too weak"),
    ],
)
async def test_a_malformed_value_stops_the_server_naming_the_variable(
    tmp_path: Path, store: Store, value: str, reason: str
) -> None:
    with pytest.raises(AdminKeyRefused, match=reason) as refused:
        start_server(tmp_path, store, value)
    assert ADMIN_KEY_ENV in str(refused.value)
    assert store.keys.list() == []


async def test_an_id_held_with_another_secret_is_refused_and_never_overwritten(tmp_path: Path, store: Store) -> None:
    key, key_id, secret = new_key()
    install_admin_key(store, SecretStr(key))
    impostor = f"berth_{key_id}_{secrets.token_urlsafe(32)}"
    with pytest.raises(AdminKeyRefused, match=f"{ADMIN_KEY_ENV}.*{key_id}.*different secret.*never overwrites"):
        start_server(tmp_path, store, impostor)
    (row,) = [k for k in store.keys.list() if k.key_id == key_id]
    assert store.keys.authenticate(key).key_id == key_id  # the stored key still works, the impostor does not
    with pytest.raises(Exception, match="not valid"):
        store.keys.authenticate(impostor)
    assert store.keys._get(key_id).secret_sha256 == hash_secret(secret)


async def test_an_id_held_by_a_non_admin_key_is_refused(tmp_path: Path, store: Store) -> None:
    viewer = store.keys.create(Role.viewer, name="someone's")
    with pytest.raises(AdminKeyRefused, match=f"{ADMIN_KEY_ENV}.*{viewer.key_id}.*as a viewer key"):
        start_server(tmp_path, store, viewer.key)
    assert store.keys.authenticate(viewer.key).role == Role.viewer


async def test_a_revoked_key_stays_revoked_and_the_server_starts(
    tmp_path: Path, store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    key, key_id, _ = new_key()
    install_admin_key(store, SecretStr(key))
    store.keys.revoke(key_id)
    with caplog.at_level(logging.WARNING, logger="berth.api"):
        app = start_server(tmp_path, store, key)
    assert (await list_keys(app, key)).status_code == 401
    assert f"{key_id} from {ADMIN_KEY_ENV} was revoked" in caplog.text


async def test_the_secret_appears_in_no_log_and_no_message(
    tmp_path: Path, store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    key, key_id, secret = new_key()
    messages = []
    with caplog.at_level(logging.DEBUG):
        start_server(tmp_path, store, key)  # stored
        start_server(tmp_path, store, key)  # already there
        for bad in (f"berth_{key_id}_{secret[:20]}", f"berth_{key_id}_{secrets.token_urlsafe(32)}", f"x{key}"):
            with pytest.raises(AdminKeyRefused) as refused:
                start_server(tmp_path, store, bad)
            messages.append(str(refused.value))
    assert key_id in caplog.text  # the log names the key by its id
    for text in (caplog.text, *messages):
        assert secret not in text and secret[:20] not in text
    config = BerthConfig(admin_key=SecretStr(key))
    assert secret not in repr(config) and secret not in str(config.model_dump())
    assert config.to_env()[ADMIN_KEY_ENV] == key  # `berth up` hands its children the key itself


def test_berth_server_refuses_to_start_on_a_malformed_value(tmp_path: Path) -> None:
    secret = "too-short-to-be-a-secret"
    env = {
        **os.environ,
        ADMIN_KEY_ENV: f"berth_0123456789ab_{secret}",
        "BERTH_DATA_DIR": str(tmp_path),
        "BERTH_DATABASE_URL": f"sqlite:///{tmp_path / 'b.db'}",
        "BERTH_API_PORT": str(closed_port()),
        "BERTH_TEMPORAL_ADDRESS": f"127.0.0.1:{closed_port()}",
    }
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli.main", "server"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert f"error: {ADMIN_KEY_ENV} is too weak" in done.stderr and secret not in done.stderr + done.stdout
