"""What a simulated GPU reports as its utilization (issue 35, part 4): the share of the time since the last
heartbeat during which a generation ran on it, as NVML reports a real GPU's share of time a kernel ran. It read 0%
while its replicas generated, so the console's utilization chart of a busy simulated fleet was flat at zero."""

from __future__ import annotations

import time
from pathlib import Path

from orchestrator.engines.replicas import SimulatedReplicaEngine
from orchestrator.node import SimulatedDiscovery, WeightsCache, parse_simulate
from orchestrator.node.agent import NodeAgent, NodeOptions
from orchestrator.node.control_plane import ControlPlane
from orchestrator.node.replicas import Replica, ReplicaManager, busy_shares
from sdk.wire.catalogue import ModelEntry


def _replica(replica_id: str, gpus: tuple[int, ...]) -> Replica:
    return Replica(replica_id, ModelEntry(name="m", weights_gib=2), gpus, "warm", "disk")


def test_a_gpu_reports_the_share_of_the_beat_a_generation_ran_on_it() -> None:
    a, b = _replica("a", (0,)), _replica("b", (1, 2))
    a.generation_started(100.0)
    a.generation_started(101.0)  # two at once on one replica: the GPU is busy once, not twice
    a.generation_ended(102.0)
    a.generation_ended(103.0)
    b.generation_started(104.0)  # still running at the beat
    shares, seen = busy_shares([a, b], {}, elapsed_s=5.0, now=105.0)
    assert shares == {0: 0.6, 1: 0.2, 2: 0.2} and seen == {"a": 3.0, "b": 1.0}

    # The next beat counts only what ran since the last one.
    b.generation_ended(107.0)
    shares, seen = busy_shares([a, b], seen, elapsed_s=5.0, now=110.0)
    assert shares == {0: 0.0, 1: 0.4, 2: 0.4} and seen == {"a": 3.0, "b": 3.0}
    assert busy_shares([a], seen, elapsed_s=0.0, now=110.0)[0] == {0: 0.0}  # the first beat has no period


def test_a_simulated_node_heartbeats_its_generating_gpu_as_busy(tmp_path: Path) -> None:
    options = NodeOptions(node_id="gpu-a", join_token="t", cache_dir=tmp_path / "node", zone="z1")
    engine = SimulatedReplicaEngine(load_time_scale=0.001, latency_scale=0, log_dir=tmp_path / "logs")
    replicas = ReplicaManager(WeightsCache(tmp_path / "cache", 2**30), {"simulated": engine})
    agent = NodeAgent(
        options, SimulatedDiscovery(parse_simulate("2xH100-80GB"), "gpu-a"), ControlPlane("http://berth"), replicas
    )
    replica = _replica("r", (1,))
    replicas._replicas["r"] = replica
    assert [g.utilization_pct for g in agent.heartbeat_body().gpus] == [0, 0]
    replica.generation_started(time.monotonic())
    time.sleep(0.05)
    idle, busy = agent.heartbeat_body().gpus
    assert idle.utilization_pct == 0 and busy.utilization_pct is not None and busy.utilization_pct >= 80
    replica.generation_ended(time.monotonic())
    time.sleep(0.05)
    assert (agent.heartbeat_body().gpus[1].utilization_pct or 0) < 80
