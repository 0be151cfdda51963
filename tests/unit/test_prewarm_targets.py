"""Prewarm target selection: which nodes get a model's weights on disk, and from where."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from orchestrator.pool.prewarm import PrewarmRefused, prewarm_targets, weights_bytes
from sdk.wire.catalogue import ModelEntry
from sdk.wire.fleet import CachedModelWeights, GpuView, MigDeviceDescription, NodeView

EIGHT_B = ModelEntry(name="llama-3.1-8b", weights_gib=15.0, kv_headroom_gib=8.0, tensor_parallel=[1, 2])
SEVENTY_B = ModelEntry(name="llama-3.1-70b", weights_gib=131.5, kv_headroom_gib=20.0, tensor_parallel=[2, 4, 8])
HOSTED = ModelEntry(name="openai/gpt-4o", provider="hosted", api_key_env="OPENAI_API_KEY")
H100_MIB = 81_559
L4_MIB = 23_034
TB = 10**12


def node(
    node_id: str,
    dc: str = "dc1",
    gpus: list[int] | None = None,
    *,
    status: str = "healthy",
    cached: tuple[str, ...] = (),
    cache: int = TB,
    mig: list[int] | None = None,
) -> NodeView:
    views = [
        GpuView(index=i, type_name="H100-80GB", memory_total_mib=m)
        for i, m in enumerate(gpus if gpus is not None else [H100_MIB] * 2)
    ]
    if mig is not None:
        views.append(
            GpuView(
                index=len(views),
                type_name="A100-80GB",
                memory_total_mib=81_920,
                mig_mode=True,
                mig_devices=[MigDeviceDescription(uuid=f"MIG-{i}", memory_total_mib=m) for i, m in enumerate(mig)],
            )
        )
    return NodeView(
        node_id=node_id,
        datacenter=dc,
        zone=f"{dc}a",
        capacity="on-demand",
        usd_per_hour=5.0,
        disk_bandwidth_gbps=2.0,
        weights_cache_capacity_bytes=cache,
        gpus=views,
        cached_weights=[CachedModelWeights(model=m, size_bytes=10**9) for m in cached],
        status=status,
        registered_at=datetime.now(UTC),
    )  # type: ignore[arg-type]


def test_nodes_without_the_weights_fetch_from_a_peer_in_their_datacenter_else_origin() -> None:
    fleet = [node("c", "dc2"), node("a", "dc1", cached=("llama-3.1-8b",)), node("b", "dc1"), node("d", "dc2")]
    assert prewarm_targets(fleet, EIGHT_B, None) == [("b", "datacenter"), ("c", "origin"), ("d", "origin")]


def test_a_datacenter_limits_the_targets() -> None:
    fleet = [node("a", "dc1"), node("b", "dc2")]
    assert prewarm_targets(fleet, EIGHT_B, "dc2") == [("b", "origin")]


def test_only_healthy_nodes_are_targets_but_a_draining_peer_still_serves_its_disk() -> None:
    fleet = [
        node("a", status="draining", cached=("llama-3.1-8b",)),
        node("b", status="unhealthy"),
        node("c", status="lost"),
        node("d"),
    ]
    assert prewarm_targets(fleet, EIGHT_B, None) == [("d", "datacenter")]
    lost_peer = [node("a", status="lost", cached=("llama-3.1-8b",)), node("d")]
    assert prewarm_targets(lost_peer, EIGHT_B, None) == [("d", "origin")]


def test_the_cache_must_be_able_to_hold_the_weights() -> None:
    size = weights_bytes(EIGHT_B)
    assert size == round(15.0 * 2**30)
    fleet = [node("small", cache=size - 1), node("exact", cache=size), node("none", cache=0)]
    assert prewarm_targets(fleet, EIGHT_B, None) == [("exact", "origin")]


def test_the_model_must_fit_the_nodes_gpus_at_an_allowed_degree() -> None:
    # 70B needs 151.5 GiB: two H100s (2 × 75.75 GiB) hold it; two L4s or four L4s do not (8 would).
    fleet = [
        node("h100x2"),
        node("h100x1", gpus=[H100_MIB]),
        node("l4x4", gpus=[L4_MIB] * 4),
        node("l4x8", gpus=[L4_MIB] * 8),
        node("unknown", gpus=[]),
    ]
    fleet[4].gpus = [GpuView(index=0, type_name="unknown", memory_total_mib=None)] * 2
    assert prewarm_targets(fleet, SEVENTY_B, None) == [("h100x2", "origin"), ("l4x8", "origin")]
    # The 8B (23 GiB) fits one H100 or two L4s (degree 2), but not one L4.
    small = [node("l4x1", gpus=[L4_MIB]), node("l4x2", gpus=[L4_MIB] * 2)]
    assert prewarm_targets(small, EIGHT_B, None) == [("l4x2", "origin")]


def test_an_unhealthy_gpu_does_not_count_and_mig_instances_serve_degree_one_only() -> None:
    sick = node("sick", gpus=[H100_MIB, H100_MIB])
    sick.gpus[1] = sick.gpus[1].model_copy(update={"healthy": False})
    assert prewarm_targets([sick], SEVENTY_B, None) == []
    mig = node("mig", gpus=[], mig=[40 * 1024, 40 * 1024])
    assert prewarm_targets([mig], EIGHT_B, None) == [("mig", "origin")]  # one 40 GB instance holds 23 GiB
    assert prewarm_targets([mig], ModelEntry(name="m", weights_gib=50, tensor_parallel=[2]), None) == []


def test_an_unknown_datacenter_is_refused_naming_the_field() -> None:
    with pytest.raises(PrewarmRefused) as refused:
        prewarm_targets([node("a", "dc1")], EIGHT_B, "mars-1")
    assert refused.value.field == "datacenter" and "mars-1" in str(refused.value)
    assert isinstance(refused.value, ValueError)


def test_a_hosted_model_is_refused_naming_the_field() -> None:
    with pytest.raises(PrewarmRefused) as refused:
        prewarm_targets([node("a")], HOSTED, None)
    assert refused.value.field == "model" and "openai/gpt-4o" in str(refused.value)


def test_an_empty_fleet_without_a_datacenter_has_no_targets() -> None:
    assert prewarm_targets([], EIGHT_B, None) == []
