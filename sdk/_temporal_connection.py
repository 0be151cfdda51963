"""How a tool worker reaches Temporal: like Temporal's own CLI and SDKs, from arguments over the environment.

A worker runs where its tools' code and credentials live, often far from the control plane, and
Temporal Cloud or an mTLS cluster is reached only with a namespace, TLS and an API key. Temporal's
environment configuration (`TEMPORAL_ADDRESS`, `TEMPORAL_NAMESPACE`, `TEMPORAL_API_KEY`,
`TEMPORAL_TLS_CLIENT_CERT_PATH`, `TEMPORAL_TLS_CLIENT_KEY_PATH`, `TEMPORAL_TLS_SERVER_CA_CERT_PATH`,
`TEMPORAL_PROFILE` and its TOML profiles) is read first; `serve()`'s arguments win over it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from temporalio.envconfig import ClientConfig
from temporalio.service import TLSConfig

from ._errors import InvalidSpec

DEFAULT_TEMPORAL_ADDRESS = "127.0.0.1:7233"  # `berth up`'s embedded dev server


def temporal_connection(
    address: str | None = None,
    namespace: str | None = None,
    api_key: str | None = None,
    tls: bool | TLSConfig | None = None,
    environment: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The keyword arguments of `temporalio.client.Client.connect` for a tool worker: Temporal's environment
    configuration (or `environment` in its place), overridden by every argument given. An API key without a
    TLS choice connects over TLS, as Temporal Cloud requires."""
    try:
        connect: dict[str, Any] = dict(ClientConfig.load_client_connect_config(override_env_vars=environment))
    except OSError as exc:  # a TLS file the configuration names is missing or unreadable
        raise InvalidSpec(
            f"cannot read {exc.filename}, named by Temporal's connection configuration: {exc.strerror}", field="tls"
        ) from None
    given = {"target_host": address, "namespace": namespace, "api_key": api_key, "tls": tls}
    connect.update({key: value for key, value in given.items() if value is not None})
    connect.setdefault("target_host", DEFAULT_TEMPORAL_ADDRESS)
    connect.setdefault("namespace", "default")
    if connect.get("api_key") and "tls" not in connect:
        connect["tls"] = True
    return connect
