"""Berth's processes present the mTLS certificate or API key the BERTH_TEMPORAL_* settings give, and refuse at
start, naming the variable, settings that cannot work.

What is checked here is what each process hands to `temporalio.client.Client.connect`; a real TLS handshake is
not: Temporal's dev server (the one the other suites start) serves no TLS, and no TLS frontend is reachable here.
The certificates are made in the test (an EC CA, a server and a client certificate it signs).
"""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from temporalio.service import TLSConfig

from orchestrator import temporal
from orchestrator.api.temporal_gateway import TemporalGateway
from orchestrator.cli import main as cli
from orchestrator.config import BerthConfig, TemporalSettingsRefused
from orchestrator.temporal import connect_temporal, temporal_connect_kwargs, temporal_connect_options

SETTINGS = (
    "BERTH_TEMPORAL_TLS",
    "BERTH_TEMPORAL_TLS_CERT",
    "BERTH_TEMPORAL_TLS_KEY",
    "BERTH_TEMPORAL_TLS_CA",
    "BERTH_TEMPORAL_TLS_SERVER_NAME",
    "BERTH_TEMPORAL_API_KEY",
)


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _certificate(subject: str, key: ec.EllipticCurvePrivateKey, issuer: str, issuer_key: Any, ca: bool) -> bytes:
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(_name(issuer))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .sign(issuer_key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM)


def _key_pem(key: ec.EllipticCurvePrivateKey, password: bytes | None = None) -> bytes:
    encryption = serialization.BestAvailableEncryption(password) if password else serialization.NoEncryption()
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """ca.pem, client.pem with client-key.pem, another key, an encrypted client key, and a file that is no PEM."""
    root = tmp_path_factory.mktemp("pki")
    ca_key = ec.generate_private_key(ec.SECP256R1())
    client_key = ec.generate_private_key(ec.SECP256R1())
    files = {
        "ca": _certificate("berth-test-ca", ca_key, "berth-test-ca", ca_key, ca=True),
        "cert": _certificate("berth-worker", client_key, "berth-test-ca", ca_key, ca=False),
        "key": _key_pem(client_key),
        "other_key": _key_pem(ec.generate_private_key(ec.SECP256R1())),
        "encrypted_key": _key_pem(client_key, b"passphrase"),
        "not_pem": b"hello\n",
    }
    paths = {}
    for name, data in files.items():
        paths[name] = root / f"{name}.pem"
        paths[name].write_bytes(data)
    return paths


@pytest.fixture(autouse=True)
def no_temporal_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in SETTINGS:
        monkeypatch.delenv(name, raising=False)


def config(**settings: object) -> BerthConfig:
    return BerthConfig.model_validate({"temporal_address": "temporal.example:7233", **settings})


def refused(**settings: object) -> str:
    with pytest.raises(TemporalSettingsRefused) as exc:
        temporal_connect_options(config(**settings))
    return str(exc.value)


def test_without_settings_berth_connects_in_plain_text_with_no_key() -> None:
    assert temporal_connect_options(config()) == {"tls": False}


def test_an_api_key_alone_connects_over_tls_against_the_systems_roots() -> None:
    assert temporal_connect_options(config(temporal_api_key="tcld-key")) == {"tls": True, "api_key": "tcld-key"}
    # Said outright, TLS may be off (a frontend behind a TLS-terminating proxy on the same host).
    assert temporal_connect_options(config(temporal_api_key="k", temporal_tls=False)) == {"tls": False, "api_key": "k"}
    assert temporal_connect_options(config(temporal_tls=True)) == {"tls": True}


def test_mutual_tls_hands_the_files_bytes_and_the_server_name_to_the_client(pki: dict[str, Path]) -> None:
    options = temporal_connect_options(
        config(
            temporal_tls_cert=pki["cert"],
            temporal_tls_key=pki["key"],
            temporal_tls_ca=pki["ca"],
            temporal_tls_server_name="frontend.temporal.internal",
        )
    )
    assert options == {
        "tls": TLSConfig(
            server_root_ca_cert=pki["ca"].read_bytes(),
            domain="frontend.temporal.internal",
            client_cert=pki["cert"].read_bytes(),
            client_private_key=pki["key"].read_bytes(),
        )
    }
    # A CA alone: the server's certificate is checked against it, and no client certificate is sent.
    (only_ca,) = temporal_connect_options(config(temporal_tls_ca=pki["ca"])).values()
    assert isinstance(only_ca, TLSConfig) and only_ca.client_cert is None and only_ca.server_root_ca_cert


def test_the_settings_come_from_berth_temporal_variables(pki: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BERTH_TEMPORAL_TLS_CERT", str(pki["cert"]))
    monkeypatch.setenv("BERTH_TEMPORAL_TLS_KEY", str(pki["key"]))
    monkeypatch.setenv("BERTH_TEMPORAL_TLS_CA", str(pki["ca"]))
    monkeypatch.setenv("BERTH_TEMPORAL_TLS_SERVER_NAME", "frontend")
    monkeypatch.setenv("BERTH_TEMPORAL_API_KEY", "secret-key")
    loaded = BerthConfig.load()
    assert loaded.temporal_tls_cert == pki["cert"] and loaded.temporal_tls_server_name == "frontend"
    assert "secret-key" not in repr(loaded)  # a SecretStr, as the admin key: never in a log line
    options = temporal_connect_options(loaded)
    assert options["api_key"] == "secret-key" and options["tls"].client_cert == pki["cert"].read_bytes()
    # Handed to child processes (as `berth up` does) unchanged.
    assert loaded.to_env()["BERTH_TEMPORAL_API_KEY"] == "secret-key"
    assert loaded.to_env()["BERTH_TEMPORAL_TLS_CA"] == str(pki["ca"])


def test_a_certificate_without_its_key_or_a_key_without_its_certificate_is_refused(pki: dict[str, Path]) -> None:
    message = refused(temporal_tls_cert=pki["cert"])
    assert message.startswith("BERTH_TEMPORAL_TLS_KEY:") and "BERTH_TEMPORAL_TLS_CERT is set" in message
    message = refused(temporal_tls_key=pki["key"])
    assert message.startswith("BERTH_TEMPORAL_TLS_CERT:") and "BERTH_TEMPORAL_TLS_KEY is set" in message


def test_a_file_that_cannot_be_read_is_refused_naming_its_variable(pki: dict[str, Path], tmp_path: Path) -> None:
    missing = tmp_path / "absent.pem"
    message = refused(temporal_tls_cert=missing, temporal_tls_key=pki["key"])
    assert message.startswith("BERTH_TEMPORAL_TLS_CERT:") and str(missing) in message
    assert refused(temporal_tls_ca=missing).startswith("BERTH_TEMPORAL_TLS_CA:")
    assert refused(temporal_tls_cert=pki["cert"], temporal_tls_key=tmp_path).startswith("BERTH_TEMPORAL_TLS_KEY:")


def test_files_that_hold_the_wrong_thing_are_refused_naming_their_variable(pki: dict[str, Path]) -> None:
    assert refused(temporal_tls_ca=pki["not_pem"]).startswith("BERTH_TEMPORAL_TLS_CA:")
    assert refused(temporal_tls_cert=pki["key"], temporal_tls_key=pki["key"]).startswith("BERTH_TEMPORAL_TLS_CERT:")
    assert refused(temporal_tls_cert=pki["cert"], temporal_tls_key=pki["cert"]).startswith("BERTH_TEMPORAL_TLS_KEY:")
    # A key of another certificate: OpenSSL's own check, before any connection is tried.
    message = refused(temporal_tls_cert=pki["cert"], temporal_tls_key=pki["other_key"])
    assert message.startswith("BERTH_TEMPORAL_TLS_KEY:") and "not the private key" in message
    # Temporal's client takes no passphrase.
    message = refused(temporal_tls_cert=pki["cert"], temporal_tls_key=pki["encrypted_key"])
    assert message.startswith("BERTH_TEMPORAL_TLS_KEY:") and "encrypted" in message


def test_tls_said_off_beside_tls_files_is_refused(pki: dict[str, Path]) -> None:
    assert refused(temporal_tls=False, temporal_tls_ca=pki["ca"]).startswith("BERTH_TEMPORAL_TLS:")
    assert refused(temporal_tls=False, temporal_tls_server_name="x").startswith("BERTH_TEMPORAL_TLS:")


class ConnectCalls:
    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    async def __call__(self, address: str, **kwargs: Any) -> object:
        self.calls.append((address, kwargs))
        return object()


async def test_connect_temporal_passes_the_credentials_and_does_not_retry_bad_ones(
    pki: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    connect = ConnectCalls()
    monkeypatch.setattr(temporal.Client, "connect", connect)
    settings = config(temporal_tls_cert=pki["cert"], temporal_tls_key=pki["key"], temporal_api_key="k")
    await connect_temporal(settings, attempts=1)
    ((address, kwargs),) = connect.calls
    assert address == "temporal.example:7233"
    assert kwargs["api_key"] == "k" and kwargs["tls"].client_private_key == pki["key"].read_bytes()
    assert kwargs == temporal_connect_kwargs(settings) | {"interceptors": kwargs["interceptors"]}
    with pytest.raises(TemporalSettingsRefused):
        await connect_temporal(config(temporal_tls_cert=pki["cert"]), attempts=60, delay_s=10)
    assert len(connect.calls) == 1  # refused before the first try, not after a minute of them


async def test_the_api_servers_gateway_connects_with_the_credentials(
    pki: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    connect = ConnectCalls()
    monkeypatch.setattr("orchestrator.api.temporal_gateway.Client.connect", connect)
    options = temporal_connect_options(config(temporal_tls_ca=pki["ca"], temporal_api_key="k"))
    await TemporalGateway("temporal.example:7233", "berth", credentials=options).client()
    ((_, kwargs),) = connect.calls
    assert kwargs["namespace"] == "berth" and kwargs["api_key"] == "k"
    assert kwargs["tls"].server_root_ca_cert == pki["ca"].read_bytes()


def test_a_tool_worker_serves_with_the_credentials(pki: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.cli import tool_worker

    given: dict[str, Any] = {}

    async def serve(*agents: object, **kwargs: Any) -> None:
        given.update(kwargs)

    monkeypatch.setattr(tool_worker, "serve", serve)
    settings = config(temporal_tls_cert=pki["cert"], temporal_tls_key=pki["key"], temporal_api_key="k")
    assert tool_worker.run_tool_worker(settings, ["orchestrator.demo.sample_agents:ALL"]) == 0
    assert given["temporal_api_key"] == "k" and given["tls"].client_cert == pki["cert"].read_bytes()
    # Without Berth's settings, serve() is left to Temporal's own environment (TEMPORAL_API_KEY, TEMPORAL_TLS_*).
    given.clear()
    assert tool_worker.run_tool_worker(config(), ["orchestrator.demo.sample_agents:ALL"]) == 0
    assert given["temporal_api_key"] is None and given["tls"] is None


@pytest.mark.parametrize(
    "command", [["server"], ["worker"], ["worker", "--agents", "orchestrator.demo.sample_agents:ALL"]]
)
def test_each_process_stops_at_start_naming_the_variable(
    command: list[str], pki: dict[str, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("BERTH_TEMPORAL_TLS_CERT", str(pki["cert"]))
    monkeypatch.setenv("BERTH_TEMPORAL_ADDRESS", "127.0.0.1:1")  # nothing is reached: it stops before connecting
    monkeypatch.setenv("BERTH_WORKER_METRICS_PORT", "0")
    code = cli.main(command)
    assert code == 2
    assert "error: BERTH_TEMPORAL_TLS_KEY:" in capsys.readouterr().err
