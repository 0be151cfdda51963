"""A tool worker reaches Temporal as Temporal's CLI does: its environment configuration, then serve()'s arguments."""

from __future__ import annotations

from pathlib import Path

import pytest

from sdk import InvalidSpec
from sdk._temporal_connection import temporal_connection

CLOUD = {
    "TEMPORAL_ADDRESS": "acme.a1b2c.tmprl.cloud:7233",
    "TEMPORAL_NAMESPACE": "acme.a1b2c",
    "TEMPORAL_API_KEY": "secret-key",
}


def test_nothing_configured_is_berth_ups_dev_server() -> None:
    assert temporal_connection(environment={}) == {"target_host": "127.0.0.1:7233", "namespace": "default"}


def test_temporal_cloud_from_the_environment_connects_over_tls_with_its_key() -> None:
    assert temporal_connection(environment=CLOUD) == {
        "target_host": "acme.a1b2c.tmprl.cloud:7233",
        "namespace": "acme.a1b2c",
        "api_key": "secret-key",
        "tls": True,
    }


def test_arguments_win_over_the_environment() -> None:
    connect = temporal_connection("temporal.internal:7233", "prod", tls=False, environment=CLOUD)
    assert connect == {
        "target_host": "temporal.internal:7233",
        "namespace": "prod",
        "api_key": "secret-key",
        "tls": False,
    }


def test_mtls_files_are_read_and_a_missing_one_is_refused_naming_it(tmp_path: Path) -> None:
    cert, key = tmp_path / "client.pem", tmp_path / "client.key"
    cert.write_bytes(b"-----BEGIN CERTIFICATE-----\n")
    key.write_bytes(b"-----BEGIN PRIVATE KEY-----\n")
    env = {
        "TEMPORAL_ADDRESS": "temporal.internal:7233",
        "TEMPORAL_TLS_CLIENT_CERT_PATH": str(cert),
        "TEMPORAL_TLS_CLIENT_KEY_PATH": str(key),
    }
    tls = temporal_connection(environment=env)["tls"]
    assert (tls.client_cert, tls.client_private_key) == (cert.read_bytes(), key.read_bytes())
    with pytest.raises(InvalidSpec) as missing:
        temporal_connection(environment={**env, "TEMPORAL_TLS_CLIENT_KEY_PATH": str(tmp_path / "gone.key")})
    assert missing.value.field == "tls" and "gone.key" in str(missing.value)
