"""docker-compose.yml publishes Berth's API alone: nothing that answers without Berth's keys is reachable from
another machine. Temporal's frontend would let anyone signal, terminate or read any task; PostgreSQL holds the
store; the worker's and node's metrics ports, Prometheus and the Temporal UI ask no one who is calling."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

COMPOSE = Path(__file__).resolve().parents[2] / "deploy" / "docker-compose.yml"
LOOPBACK = {"127.0.0.1", "localhost", "::1", "[::1]"}
# The API, the admin UI and MCP share the server's port, and refuse every /v1, UI and MCP request without a key.
BERTHS_API = ("server", 8080)


def services() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())["services"]


def published(service: dict[str, Any]) -> list[tuple[str, int]]:
    """(host address, container port) of each port the service publishes; "" is every address."""
    found = []
    for entry in service.get("ports", []):
        if isinstance(entry, dict):  # the long syntax
            found.append((entry.get("host_ip", ""), int(entry["target"])))
            continue
        # [IP:][HOST_PORT:]CONTAINER_PORT[/PROTOCOL]; a container port alone is published on every address too.
        text, ip = str(entry).split("/")[0], ""
        if text.startswith("["):  # an IPv6 address
            ip, _, text = text.partition("]:")
            ip += "]"
        elif text.count(":") == 2:
            ip, _, text = text.partition(":")
        found.append((ip, int(text.split(":")[-1])))
    return found


def test_only_berths_api_is_published_beyond_this_host() -> None:
    open_ports = [
        (name, port) for name, service in services().items() for ip, port in published(service) if ip not in LOOPBACK
    ]
    assert open_ports == [BERTHS_API]


def test_temporal_postgres_and_metrics_ports_are_not_published_at_all() -> None:
    every = services()
    for name in ("temporal", "postgres", "worker", "node"):
        assert published(every[name]) == [], name
    # The operator's own tools, on this host's loopback; the Temporal UI only when asked for.
    assert {ip for ip, _ in published(every["prometheus"])} <= LOOPBACK
    assert {ip for ip, _ in published(every["temporal-ui"])} <= LOOPBACK and every["temporal-ui"]["profiles"] == [
        "debug"
    ]


def test_temporal_and_postgres_are_on_an_internal_network_only() -> None:
    document = yaml.safe_load(COMPOSE.read_text())
    assert document["networks"]["private"]["internal"] is True
    for name in ("temporal", "postgres"):
        assert document["services"][name]["networks"] == ["private"], name
    for name in ("server", "worker", "node"):  # Berth's own services reach both sides
        assert "private" in document["services"][name]["networks"], name
