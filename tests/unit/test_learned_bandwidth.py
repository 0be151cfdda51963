"""Learned bandwidths: the pool's load times follow what nodes measured, so a slow peer or a fast origin flips
the decision between a node in the weights' datacenter (a peer copy) and one elsewhere (an origin fetch)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from orchestrator.pool import DEFAULT_CONFIG, Device, FleetState, ModelSpec, Node, PlacementRequest, place
from orchestrator.pool.bandwidth import LearnedBandwidth
from orchestrator.store import Store
from orchestrator.weights_transfer import GIB, MIN_SAMPLE_BYTES, learned_bytes_per_s
from sdk.wire.fleet import NodeHeartbeat, NodeSpec

MODEL = ModelSpec("llama-3.1-8b", weights_gib=16, kv_headroom_gib=4)


@dataclass
class Sample:
    id: int
    node_id: str
    tier: str
    source_node: str | None
    bytes: int
    seconds: float


def fleet() -> FleetState:
    """holder (east) has the weights and no room; peer-side (east) would copy from it; far (west) from origin."""
    f = FleetState()
    for node_id, dc in (("holder", "east"), ("peer-side", "east"), ("far", "west")):
        f.add_node(Node(node_id, dc, f"{dc}-1", "on-demand", 10.0, [Device(0, f"{node_id}-0", "H100-80GB", 80)]))
    f.add_model(MODEL)
    f.cache_weights("holder", MODEL.name)
    return f


def chosen(f: FleetState) -> tuple[str, str]:
    decision = place(f, PlacementRequest(model=MODEL.name, tokens=1000, exclude_nodes=frozenset({"holder"})))
    assert decision.chosen is not None, decision.reason
    return decision.chosen.candidate.node_id, decision.chosen.candidate.tier


def test_with_nothing_measured_the_configured_rates_decide_and_the_peer_copy_wins() -> None:
    f = fleet()
    assert chosen(f) == ("peer-side", "datacenter")
    node = f.nodes["peer-side"]
    assert f.bandwidth.datacenter_gib_per_s(f, MODEL.name, node, DEFAULT_CONFIG) == DEFAULT_CONFIG.intra_dc_gib_per_s
    assert f.bandwidth.origin_gib_per_s(node, DEFAULT_CONFIG) == DEFAULT_CONFIG.wan_gib_per_s
    assert f.bandwidth.disk_gib_per_s(node) == node.disk_gib_per_s


def test_a_slow_peer_measured_sends_the_load_to_a_node_that_fetches_from_origin() -> None:
    f = fleet()
    # Copies out of `holder` measured at 40 MB/s (a congested uplink), against 2.5 GiB/s configured.
    samples = [Sample(i, "someone", "datacenter", "holder", 4 * GIB, 4 * GIB / 40e6) for i in (1, 2, 3)]
    assert f.bandwidth.observe(samples, f, DEFAULT_CONFIG) == 3
    assert chosen(f) == ("far", "origin")
    assert f.bandwidth.observe(samples, f, DEFAULT_CONFIG) == 0  # replayed samples are not counted twice


def test_a_fast_origin_measured_wins_over_a_peer_copy() -> None:
    f = fleet()
    # `far` measured its origin fills at 8 GiB/s (a CDN at the door), against 0.5 GiB/s configured.
    samples = [Sample(i, "far", "origin", None, 4 * GIB, 0.5) for i in (1, 2, 3, 4, 5)]
    f.bandwidth.observe(samples, f, DEFAULT_CONFIG)
    assert chosen(f) == ("far", "origin")


def test_an_unmeasured_holder_in_the_datacenter_keeps_the_prior_for_it() -> None:
    f = fleet()
    f.add_node(Node("holder-2", "east", "east-1", "on-demand", 10.0, [Device(0, "h2-0", "H100-80GB", 80)]))
    f.cache_weights("holder-2", MODEL.name)
    f.bandwidth.observe([Sample(1, "x", "datacenter", "holder", 4 * GIB, 100.0)], f, DEFAULT_CONFIG)
    node = f.nodes["peer-side"]
    assert f.bandwidth.datacenter_gib_per_s(f, MODEL.name, node, DEFAULT_CONFIG) == DEFAULT_CONFIG.intra_dc_gib_per_s


def test_the_estimate_moves_halfway_in_log_space_and_ignores_tiny_transfers() -> None:
    assert learned_bytes_per_s(1e9, 10 * GIB, 10 * GIB / 1e7) == pytest.approx(1e8)  # sqrt(1e9 × 1e7)
    assert learned_bytes_per_s(1e9, MIN_SAMPLE_BYTES - 1, 1e-6) == 1e9


def test_the_pool_learns_from_heartbeats_and_ticket_reports_through_the_store(tmp_path: Path) -> None:
    """The service folds the store's samples into its fleet at each sync (see also tests/api/test_peer_weights)."""
    from orchestrator.pool.service import PoolService

    store = Store.open(f"sqlite:///{tmp_path}/berth.db")
    store.fleet.register(NodeSpec(node_id="far", datacenter="west", zone="west-1", capacity="on-demand"), "s" * 20)
    store.fleet.heartbeat(
        NodeHeartbeat(node_id="far", transfers=[{"tier": "origin", "bytes": 4 * GIB, "seconds": 0.5}]), "s" * 20
    )

    class Catalogue:
        def get(self, name: str) -> None:
            return None

    pool = PoolService(store, Catalogue())
    pool.sync(force=True)
    assert pool.fleet.bandwidth.origin["far"] == pytest.approx((0.5 * GIB * 8 * GIB) ** 0.5)
    assert isinstance(pool.fleet.bandwidth, LearnedBandwidth)
    store.close()
