"""One way to reach Temporal, so every process uses the pydantic converter, the same retry and the same credentials.

A Temporal frontend that answers anyone who reaches it lets them signal, terminate or read any task, past Berth's
own keys; a deployment closes it with mutual TLS or an API key, and every Berth process that connects (the API
server, the orchestrator worker, the node agents, the tool workers) presents the credentials its `BERTH_TEMPORAL_*`
settings name. They are read and checked before anything connects: a setting that cannot work stops the process at
start with the variable's name, rather than turning into a minute of retries against a frontend that refuses it.
"""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path
from typing import Any

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import TLSConfig

from .config import ENV_PREFIX, BerthConfig, TemporalSettingsRefused
from .telemetry.tracing import tracing_interceptor

__all__ = [
    "TemporalSettingsRefused",
    "connect_temporal",
    "temporal_connect_kwargs",
    "temporal_connect_options",
    "temporal_tls",
]


def _variable(field: str) -> str:
    return ENV_PREFIX + field.upper()


def _read_pem(field: str, path: Path, marker: str) -> bytes:
    """The file's bytes, refused (naming the variable) unless it is readable and holds a PEM block `marker`."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TemporalSettingsRefused(f"{_variable(field)}: cannot read {path}: {exc.strerror or exc}") from None
    if b"-----BEGIN " not in data or marker.encode() not in data:
        raise TemporalSettingsRefused(f"{_variable(field)}: {path} holds no PEM {marker.lower()}")
    return data


def _refuse_a_passphrase() -> bytes:
    # Called by OpenSSL only for an encrypted key. Temporal's client takes the key's bytes and no passphrase.
    raise TemporalSettingsRefused(
        f"{_variable('temporal_tls_key')}: the key is encrypted; Temporal's client needs it unencrypted"
    )


def _check_pair(cert: Path, key: Path) -> None:
    """OpenSSL's own check that the key parses and is the certificate's."""
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_cert_chain(cert, key, password=_refuse_a_passphrase)
    except ssl.SSLError as exc:
        raise TemporalSettingsRefused(
            f"{_variable('temporal_tls_key')}: {key} is not the private key of {_variable('temporal_tls_cert')}"
            f" ({cert}): {exc.reason or exc}"
        ) from None


def _check_ca(ca: bytes, path: Path) -> None:
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cadata=ca.decode("ascii", "replace"))
    except ssl.SSLError as exc:
        raise TemporalSettingsRefused(
            f"{_variable('temporal_tls_ca')}: {path} holds no usable CA certificate: {exc.reason or exc}"
        ) from None


def temporal_tls(config: BerthConfig) -> TLSConfig | bool:
    """The TLS half of the connection: False (plain), True (TLS checked against the system's roots) or a TLSConfig
    with the client certificate, the CA and the server name the settings give, their files read and checked."""
    cert_path, key_path, ca_path = config.temporal_tls_cert, config.temporal_tls_key, config.temporal_tls_ca
    if (cert_path is None) != (key_path is None):
        given, missing = (
            ("temporal_tls_cert", "temporal_tls_key") if cert_path else ("temporal_tls_key", "temporal_tls_cert")
        )
        raise TemporalSettingsRefused(
            f"{_variable(missing)}: {_variable(given)} is set, and mutual TLS needs both the client certificate"
            f" and its private key"
        )
    files = cert_path is not None or ca_path is not None
    wanted = config.temporal_tls
    if wanted is None:
        wanted = files or bool(config.temporal_tls_server_name) or config.temporal_api_key is not None
    elif not wanted and (files or config.temporal_tls_server_name):
        raise TemporalSettingsRefused(
            f"{_variable('temporal_tls')}: false, yet a TLS certificate, CA or server name is set"
        )
    if not wanted:
        return False
    if not files and not config.temporal_tls_server_name:
        return True
    client_cert = client_key = ca = None
    if cert_path is not None and key_path is not None:
        client_cert = _read_pem("temporal_tls_cert", cert_path, "CERTIFICATE-----")
        client_key = _read_pem("temporal_tls_key", key_path, "PRIVATE KEY-----")
        _check_pair(cert_path, key_path)
    if ca_path is not None:
        ca = _read_pem("temporal_tls_ca", ca_path, "CERTIFICATE-----")
        _check_ca(ca, ca_path)
    return TLSConfig(
        server_root_ca_cert=ca,
        domain=config.temporal_tls_server_name,
        client_cert=client_cert,
        client_private_key=client_key,
    )


def temporal_connect_options(config: BerthConfig) -> dict[str, Any]:
    """The credentials half of `Client.connect`'s keyword arguments: `tls` and, when one is set, `api_key`."""
    options: dict[str, Any] = {"tls": temporal_tls(config)}
    if config.temporal_api_key is not None:
        options["api_key"] = config.temporal_api_key.get_secret_value()
    return options


def temporal_connect_kwargs(config: BerthConfig) -> dict[str, Any]:
    """Every keyword argument of `Client.connect` but the address, as every Berth process passes them."""
    return {
        "namespace": config.temporal_namespace,
        "data_converter": pydantic_data_converter,
        "interceptors": [tracing_interceptor()],
        **temporal_connect_options(config),
    }


async def connect_temporal(config: BerthConfig, attempts: int = 60, delay_s: float = 1.0) -> Client:
    """Connect, waiting for a frontend that is still starting (as under `berth up`). Settings that cannot work
    raise TemporalSettingsRefused at once: no retry makes them work."""
    kwargs = temporal_connect_kwargs(config)
    last: Exception | None = None
    for _ in range(attempts):
        try:
            return await Client.connect(config.resolved_temporal_address, **kwargs)
        except Exception as exc:  # the SDK raises RuntimeError for an unreachable frontend
            last = exc
            await asyncio.sleep(delay_s)
    raise ConnectionError(f"Temporal at {config.resolved_temporal_address} did not answer: {last}")
