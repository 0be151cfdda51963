"""The simulation: deterministic for a seed, exact on a scenario checked by hand, and driving the live
pool's own placement function."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.cli.main import main
from orchestrator.pool import admission, service
from orchestrator.pool.placement import place
from orchestrator.pool.scaler import COLD_START_WAIT_GPUS
from orchestrator.simulator.compare import run_policies, spot_nodes
from orchestrator.simulator.engine import Simulation
from orchestrator.simulator.fleet_file import MAX_FLEET_GPUS, MAX_FLEET_NODES, parse_fleet
from orchestrator.simulator.json_input import MAX_JSON_DEPTH
from orchestrator.simulator.plan import CallPlan, SessionPlan, Workload
from orchestrator.simulator.policies import POLICY_NAMES, berth_policy, policy_named
from orchestrator.simulator.report import summarize
from orchestrator.simulator.results import SimResult
from orchestrator.simulator.scenarios import STANDARD_FLEET, catalogue_models
from orchestrator.simulator.workload import WorkloadSpec, generate
from orchestrator.weights_transfer import DISK_BYTES_PER_S, GIB

ONE_GPU = parse_fleet(
    [{"node_id": "n", "datacenter": "east", "zone": "east-1a", "gpus": "1xH100-80GB", "usd_per_hour": 3.6}]
)
SMALL = "llama-3.2-1b"  # 2.3 GiB of weights, 32 slots


def one_call_session(session_id: str, at: float) -> SessionPlan:
    return SessionPlan(session_id, at, (CallPlan(SMALL, prompt_tokens=1000, output_tokens=100),))


def test_a_hand_checked_scenario_gives_the_exact_cold_starts_and_gpu_hours() -> None:
    """Two one-call sessions 1000 s apart on one H100 under the fixed keep-alive: a cold start from the
    origin, an unload after the 300 s idle timeout (at the first 2 s scaler tick past it), then a cold
    start from the node's disk."""
    workload = Workload((one_call_session("a", 0.0), one_call_session("b", 1000.0)), duration_s=1001)
    result = Simulation(
        ONE_GPU, catalogue_models(), workload, berth_policy(ONE_GPU.placement_config(), "berth-fixed")
    ).run()

    disk_read = 2.3 / (DISK_BYTES_PER_S / GIB)
    from_origin = disk_read + 20 + 2.3 / 0.5  # disk read + engine start + the WAN copy
    from_disk = disk_read + 20
    throughput = 2500 * 15 / 2.3  # an 8B model's 2,500 tokens/s on an H100, scaled by weights read per token
    prefill = 1000 / (throughput * 4)  # prefill runs at 4× decode throughput
    serve = prefill + 100 / (throughput * 4 / 32)  # then alone in its batch: 4× one slot's share
    first, second = result.replicas
    assert (first.tier, second.tier) == ("origin", "disk")
    assert first.load_s == pytest.approx(from_origin) and second.load_s == pytest.approx(from_disk)
    idle_from = from_origin + serve
    assert first.ended_s == 326.0  # ticks every 2 s; idle since ~25.2 s, unloaded once idle ≥ 300 s
    assert result.end_s == pytest.approx(1000 + from_disk + serve)

    report = summarize(result)
    assert (report.cold_starts, report.cold_start_s) == (2, pytest.approx(from_origin + from_disk))
    held = 326.0 + (from_disk + serve)
    assert report.gpu_hours == pytest.approx(held / 3600)
    assert report.cost_usd == pytest.approx(3.6 * held / 3600)
    assert (report.ttft_p50_s, report.ttft_p99_s) == (
        pytest.approx(from_disk + prefill),
        pytest.approx(from_origin + prefill),
    )
    assert idle_from < 26
    # Both calls waited for a load: a step leased on a loading replica waits for a GPU too.
    assert report.tasks_waited == 2 and report.gpu_wait_max_s == pytest.approx(from_origin)


def test_with_no_gaps_learned_yet_the_ski_rental_window_keeps_a_replica_until_it_has_cost_a_cold_start() -> None:
    """Two one-call sessions of an 8B model 10,000 s apart under the learning policy: one idle gap is too few
    to learn from, so the replica is kept until holding it has cost what its cold start would. It holds the
    share of the GPU's memory it takes, and a cold start costs its reload seconds times that share plus
    COLD_START_WAIT_GPUS for the waiting step; timed from the tick that saw it idle."""
    model = catalogue_models()["llama-3.1-8b"]

    def session(sid: str, at: float) -> SessionPlan:
        return SessionPlan(sid, at, (CallPlan(model.name, prompt_tokens=1000, output_tokens=100),))

    workload = Workload((session("a", 0.0), session("b", 10_000.0)), duration_s=10_001)
    result = Simulation(ONE_GPU, catalogue_models(), workload, berth_policy(ONE_GPU.placement_config())).run()
    [(node, _cache)] = ONE_GPU.expand()
    held = model.memory_gib / node.devices[0].memory_gib
    from_disk = model.weights_gib / (DISK_BYTES_PER_S / GIB) + 20
    first, second = result.replicas
    [call, _] = result.calls
    assert call.done_s is not None and second.tier == "disk"
    seen_idle = 2 * math.ceil(call.done_s / 2)  # the first tick at or after the call's end sees no demand
    window = from_disk * (held + COLD_START_WAIT_GPUS) / held
    assert first.ended_s == 2 * math.ceil((seen_idle + window) / 2)  # the first tick past the window


def test_the_berth_policy_places_with_the_live_pools_own_function() -> None:
    assert service.place_away_from_reclaimed_spot is admission.place_away_from_reclaimed_spot
    assert admission.place is place  # the one function object the live pool service places with
    seen: list[object] = []
    real = admission.place

    def spy(fleet, request, config):  # noqa: ANN001
        seen.append(request)
        return real(fleet, request, config)

    admission.place = spy
    try:
        workload = Workload((one_call_session("a", 0.0),), duration_s=1)
        Simulation(ONE_GPU, catalogue_models(), workload, berth_policy(ONE_GPU.placement_config())).run()
    finally:
        admission.place = real
    assert seen and seen[0].model == SMALL


def test_a_run_is_deterministic_for_a_seed() -> None:
    spec = WorkloadSpec(
        duration_s=1800, sessions_per_hour=40, burst_every_s=600, burst_sessions=10, spot_preemptions_per_node_hour=1.0
    )

    def figures(seed: int) -> list[tuple]:
        workload = generate(spec, seed, spot_nodes(STANDARD_FLEET))
        results = run_policies(STANDARD_FLEET, catalogue_models(), workload, POLICY_NAMES, seed)
        return [
            (
                r.policy,
                [(c.issued_s, c.first_token_s, c.done_s) for c in r.calls],
                [(x.node_id, x.started_s, x.ended_s) for x in r.replicas],
                [(p.node_id, p.tokens_lost, p.tokens_lost_restart) for p in r.preemptions],
            )
            for r in results
        ]

    once = figures(3)
    assert once == figures(3)
    assert once != figures(4)
    assert [name for name, *_ in once] == list(POLICY_NAMES)


def test_a_node_killed_without_notice_loses_at_most_a_heartbeat_of_tokens_and_the_step_finishes_elsewhere() -> None:
    fleet = parse_fleet(
        [
            {
                "node_id": "spot",
                "datacenter": "east",
                "zone": "east-1b",
                "capacity": "spot",
                "gpus": "1xH100-80GB",
                "usd_per_hour": 0.5,
            },
            {"node_id": "steady", "datacenter": "east", "zone": "east-1a", "gpus": "1xH100-80GB", "usd_per_hour": 9},
        ]
    )
    long_answer = SessionPlan("a", 0.0, (CallPlan(SMALL, 2000, 4000, tool_s=1.0), CallPlan(SMALL, 6000, 4000)))
    # The first answer takes ~2 s alone in its batch (4× one slot's 509 tokens/s) after a ~25 s load: the kill
    # at 26 s is mid-answer.
    workload = Workload((long_answer,), duration_s=1, preemptions={"spot": ((26.0, 0.0),)})
    result = Simulation(fleet, catalogue_models(), workload, berth_policy(fleet.placement_config())).run()
    [cut] = result.preemptions
    rate = 2500 * 15 / 2.3 / 32 * 4
    assert result.replicas[0].node_id == "spot"  # the cheap node was chosen first
    assert cut.calls_cut == 1 and 0 < cut.tokens_lost <= -(-rate * 0.5 // 1)
    assert cut.tokens_lost_restart > 2000 + cut.tokens_lost  # a restart redoes the prompt and all it wrote
    first = result.calls[0]
    assert first.interruptions == 1 and first.done_s is not None
    assert all(c.done_s for c in result.calls) and result.sessions[0].ended_s


def test_an_unknown_model_or_policy_is_refused_naming_it() -> None:
    workload = Workload((SessionPlan("a", 0, (CallPlan("gpt-9", 10, 10),)),), duration_s=1)
    with pytest.raises(ValueError, match="workload: model 'gpt-9' is not in the catalogue"):
        Simulation(ONE_GPU, catalogue_models(), workload, berth_policy(ONE_GPU.placement_config()))
    with pytest.raises(ValueError, match="policy: unknown policy 'k9s'"):
        policy_named("k9s", ONE_GPU.placement_config(), 0)


def test_berth_simulate_compares_policies_on_a_trace_and_writes_its_report(tmp_path: Path, capsys) -> None:
    trace = tmp_path / "calls.csv"
    rows = ["timestamp,model,prompt_tokens,output_tokens,session_id"]
    rows += [
        f"{i * 7.5},{SMALL if i % 3 else 'llama-3.1-8b'},{1500 + 300 * (i % 4)},{80 + i},s{i // 4}" for i in range(40)
    ]
    trace.write_text("\n".join(rows) + "\n")
    fleet = tmp_path / "fleet.json"
    fleet.write_text(
        json.dumps([{"node_id": "g", "count": 2, "datacenter": "east", "zone": "east-1a", "gpus": "2xH100-80GB"}])
    )
    out = tmp_path / "out"
    assert main(["simulate", "--fleet", str(fleet), "--trace", str(trace), "--compare", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert all(name in printed for name in POLICY_NAMES) and "10 sessions, 40 calls" in printed
    report = json.loads((out / "report.json").read_text())
    assert set(report["policies"]) == set(POLICY_NAMES)
    assert "The warm pool, each policy against k8s-spread and always-warm:" in printed
    assert [f["name"] for f in report["warm_pool"]["k8s-spread"]][:2] == [
        "cold-start seconds beyond each model's first load",
        "GPU-hours ÷ k8s-spread's",
    ]
    assert report["warm_pool"]["k8s-spread"][1]["value"] == 1.0  # itself over itself
    assert report["policies"]["berth"]["calls"] == 40
    assert {p.name for p in out.glob("*.png")} == {"ttft.png", "gpu_hours.png", "replicas.png"}


def test_berth_simulate_refuses_bad_input_naming_the_field(tmp_path: Path, capsys) -> None:
    fleet = tmp_path / "fleet.json"
    fleet.write_text(json.dumps([{"node_id": "g", "datacenter": "east", "zone": "east-1a", "gpus": "2xH900"}]))
    assert main(["simulate", "--fleet", str(fleet), "--out", str(tmp_path / "o")]) == 2
    assert "fleet.nodes.0" in capsys.readouterr().err
    assert main(["simulate", "--scenario", "calm", "--out", str(tmp_path / "o")]) == 2
    assert "scenario: unknown scenario 'calm'" in capsys.readouterr().err
    assert main(["simulate", "--preemptions-per-node-hour", "-1", "--out", str(tmp_path / "o")]) == 2
    assert "preemptions-per-node-hour" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()  # nothing written for a refused run


def _berth_simulate(*argv: str) -> subprocess.CompletedProcess[str]:
    """`berth simulate` as a real process: a traceback is what a user would see, not something pytest catches."""
    return subprocess.run(
        [sys.executable, "-m", "orchestrator.cli.main", "simulate", *argv],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 100_000])  # nested past the bound; past Python's own
def test_berth_simulate_refuses_a_deeply_nested_file_naming_the_bound(tmp_path: Path, depth: int) -> None:
    for flag in ("--fleet", "--workload"):
        nested = tmp_path / f"nested{flag}.json"
        nested.write_text("[" * depth + "]" * depth)
        refused = _berth_simulate(flag, str(nested), "--out", str(tmp_path / "o"))
        assert refused.returncode == 2, refused.stderr[-2000:]
        (line,) = refused.stderr.strip().splitlines()  # one line, no traceback
        assert line.startswith(f"error: {flag[2:]}: ") and f"at most {MAX_JSON_DEPTH}" in line, line


def test_berth_simulate_refuses_a_fleet_beyond_its_node_or_gpu_bound(tmp_path: Path) -> None:
    group = {"datacenter": "east", "zone": "east-1a", "gpus": "8xH100-80GB", "count": 10_000}
    huge = tmp_path / "huge.json"
    huge.write_text(json.dumps([{**group, "node_id": f"g{i}"} for i in range(10)]))  # 100,000 nodes
    refused = _berth_simulate("--fleet", str(huge), "--out", str(tmp_path / "o"))
    assert refused.returncode == 2, refused.stderr[-2000:]
    assert refused.stderr.strip() == (
        f"error: fleet.nodes: 100,000 nodes (counts included); at most {MAX_FLEET_NODES:,}"
    )
    with pytest.raises(ValueError, match=f"fleet.nodes: {MAX_FLEET_NODES * 16:,} GPUs; at most {MAX_FLEET_GPUS:,}"):
        parse_fleet([{**group, "node_id": "wide", "gpus": "16xH100-80GB"}])
    assert not (tmp_path / "o").exists()


def test_two_models_packed_on_one_gpu_share_its_speed_and_bill_it_once() -> None:
    """Two small models on the fleet's one GPU: a call of one while the other generates decodes at half the
    speed it has alone (decode reads both replicas' weights through one memory), and the GPU-hours count the
    GPU once for the time either held it."""

    def run(with_other: bool) -> SimResult:
        # The 1B warms at once; qwen loads from the origin in ~51 s, then writes 20,000 tokens for a minute;
        # the 1B's second call (at 55 s) falls inside that minute.
        sessions = [
            SessionPlan("warm", 0.0, (CallPlan(SMALL, prompt_tokens=100, output_tokens=10),)),
            SessionPlan("late", 55.0, (CallPlan(SMALL, prompt_tokens=100, output_tokens=4000),)),
        ]
        if with_other:
            sessions.append(
                SessionPlan("other", 0.0, (CallPlan("qwen2.5-7b", prompt_tokens=100, output_tokens=20_000),))
            )
        return Simulation(
            ONE_GPU,
            catalogue_models(),
            Workload(tuple(sessions), duration_s=56),
            berth_policy(ONE_GPU.placement_config(), "berth-fixed"),
        ).run()

    def decode_s(result: SimResult) -> float:
        late = next(c for c in result.calls if c.session_id == "late")
        assert late.done_s is not None and late.first_token_s is not None
        return late.done_s - late.first_token_s

    alone, together = run(False), run(True)
    assert {r.devices for r in together.replicas} == {(0,)}  # both on device 0
    assert decode_s(together) == pytest.approx(2 * decode_s(alone))
    report = summarize(together)
    first_start = min(r.started_s for r in together.replicas)
    last_end = max(r.ended_s if r.ended_s is not None else together.end_s for r in together.replicas)
    assert report.gpu_hours == pytest.approx((last_end - first_start) / 3600)
    assert report.gpu_hours < sum(r.held_s(together.end_s) for r in together.replicas) / 3600
