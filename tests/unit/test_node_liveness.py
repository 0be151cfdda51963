"""Is a node gone? Asked of real evidence: its process's port (a real socket), its heartbeats (a real store)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from datetime import timedelta

import pytest

from orchestrator.pool.liveness import HEARD_WITHIN, node_liveness
from orchestrator.store import Store
from orchestrator.store.tables import utcnow
from sdk.wire.fleet import NodeHeartbeat, NodeSpec

SECRET = "s3cret-of-the-node-under-test"


@pytest.fixture
def listening() -> Iterator[int]:
    """A port a live process holds: the kernel completes connections however busy the process is."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        yield server.getsockname()[1]


def _closed_port() -> int:
    """A port nobody holds any more: what a killed node's peer port becomes."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _join(store: Store, node_id: str, peer_port: int | None) -> None:
    store.fleet.register(NodeSpec(node_id=node_id, datacenter="dc-1", zone="dc-1-a", capacity="on-demand"), SECRET)
    store.fleet.heartbeat(NodeHeartbeat(node_id=node_id, peer_port=peer_port, peer_host="127.0.0.1"), SECRET)


def test_a_node_whose_port_accepts_is_alive_however_long_its_silence(store: Store, listening: int) -> None:
    _join(store, "gpu-busy", listening)
    later = utcnow() + HEARD_WITHIN * 3
    verdict = node_liveness(store.engine, "gpu-busy", now=later)
    assert verdict.verdict == "alive" and f"127.0.0.1:{listening}" in verdict.detail


def test_a_node_whose_port_refuses_is_gone_even_when_it_beat_a_moment_ago(store: Store) -> None:
    _join(store, "gpu-killed", _closed_port())
    verdict = node_liveness(store.engine, "gpu-killed")
    assert verdict.verdict == "gone" and "refused" in verdict.detail


def test_without_a_port_recent_heartbeats_say_alive_and_a_long_silence_proves_nothing(store: Store) -> None:
    _join(store, "gpu-quiet", None)
    assert node_liveness(store.engine, "gpu-quiet").verdict == "alive"
    silent = node_liveness(store.engine, "gpu-quiet", now=utcnow() + HEARD_WITHIN + timedelta(seconds=1))
    assert silent.verdict == "unknown" and "silent" in silent.detail


def test_the_stores_verdict_comes_first(store: Store, listening: int) -> None:
    _join(store, "gpu-lost", listening)
    assert store.fleet.mark_lost_after(1, now=utcnow() + timedelta(seconds=5)) == ["gpu-lost"]
    assert node_liveness(store.engine, "gpu-lost").verdict == "gone"  # a process still up does not undo it
    _join(store, "gpu-revoked", listening)
    store.node_admission.revoke("gpu-revoked")
    assert node_liveness(store.engine, "gpu-revoked").verdict == "gone"
    assert node_liveness(store.engine, "gpu-never-joined").verdict == "gone"
