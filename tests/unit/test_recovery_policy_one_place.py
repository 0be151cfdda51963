"""The suspect-node rules live in one place (sdk/wire/recovery.py `Suspect`): the workflow that places real steps
and `berth simulate` both ask them, so a rule changed there changes both, and neither keeps a copy."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import sdk.wire.recovery as recovery
from orchestrator.simulator import engine
from orchestrator.simulator.engine import Simulation
from orchestrator.simulator.fleet_file import parse_fleet
from orchestrator.simulator.plan import CallPlan, SessionPlan, Workload
from orchestrator.simulator.policies import berth_policy
from orchestrator.simulator.results import SimResult
from orchestrator.simulator.scenarios import catalogue_models
from orchestrator.simulator.workload import WorkloadSpec, generate
from sdk.wire.lease import NodeLiveness
from workflows import fleet_recovery
from workflows.fleet_recovery import Conclude, ContinueQuiet, weigh
from workflows.interruptions import Interruption

ROOT = Path(__file__).resolve().parents[2]
ONE_NODE = parse_fleet(
    [{"node_id": "n", "datacenter": "east", "zone": "east-1a", "gpus": "1xH100-80GB", "usd_per_hour": 3.6}]
)
SMALL = "llama-3.2-1b"
SILENT = Interruption("lost", "the node stopped heartbeating", None)
ALIVE = NodeLiveness(verdict="alive", detail="heard from 0.4s ago")


def stalled_mid_answer(stall_s: float) -> SimResult:
    """One long answer on one node whose engine goes quiet at 26 s, mid-answer (its replica loads in ~25 s and
    the answer takes ~2 s alone in its batch), for `stall_s`; the simulation looks every 5 s (the heartbeat
    timeout) and the node stays alive throughout."""
    session = SessionPlan("a", 0.0, (CallPlan(SMALL, prompt_tokens=2000, output_tokens=4000),))
    workload = Workload((session,), duration_s=1, stalls={"n": ((26.0, stall_s),)})
    return Simulation(ONE_NODE, catalogue_models(), workload, berth_policy(ONE_NODE.placement_config())).run()


def test_a_short_stall_is_ridden_out_on_the_node_and_a_long_one_moves_the_step_as_the_rules_say() -> None:
    # Looks at 31 and 36 s continue the quiet generation; the engine writes again at 38 s.
    short = stalled_mid_answer(12.0)
    [call] = short.calls
    assert (call.quiet_continues, call.interruptions, call.done_s is not None) == (2, 0, True)
    assert [(s.calls_quiet, s.continued, s.calls_moved) for s in short.stalls] == [(1, 2, 0)]
    # Looks at 31, 36 and 41 s continue it (QUIET_CONTINUES); at 46 s it counts `stalled` and is placed again. A
    # stalled node is not avoided (only a busy machine), so it lands on the same replica and finishes after 49 s.
    long = stalled_mid_answer(23.0)
    [call] = long.calls
    assert (call.quiet_continues, call.interruptions) == (recovery.QUIET_CONTINUES, 1)
    assert call.done_s is not None and call.done_s > 49.0
    assert [(s.calls_quiet, s.continued, s.calls_moved) for s in long.stalls] == [(1, 3, 1)]


def test_the_simulator_and_the_workflow_change_together_when_the_one_rule_changes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    before = stalled_mid_answer(13.0).calls[0]
    assert (before.quiet_continues, before.interruptions) == (2, 0)
    assert isinstance(weigh(SILENT, ALIVE, recovery.Suspect(quiet=1), "n", "a call"), ContinueQuiet)

    monkeypatch.setattr(recovery, "QUIET_CONTINUES", 1)
    after = stalled_mid_answer(13.0).calls[0]
    assert (after.quiet_continues, after.interruptions) == (1, 1)  # given up at its second look, at 36 s
    assert isinstance(weigh(SILENT, ALIVE, recovery.Suspect(quiet=1), "n", "a call"), Conclude)


def test_both_read_the_rules_from_the_registry_and_neither_keeps_a_copy() -> None:
    assert engine.Suspect is recovery.Suspect and fleet_recovery.Suspect is recovery.Suspect
    for path in [ROOT / "orchestrator" / "simulator", ROOT / "workflows"]:
        for module in sorted(path.glob("*.py")):
            assigned = {
                target.id
                for node in ast.walk(ast.parse(module.read_text(encoding="utf-8")))
                if isinstance(node, ast.Assign)
                for target in node.targets
                if isinstance(target, ast.Name)
            }
            assert not assigned & {"QUIET_CONTINUES", "UNPROVEN_PICKUPS"}, module


def test_a_workload_draws_engine_stalls_for_every_node_only_when_asked() -> None:
    spec = WorkloadSpec(duration_s=3600, sessions_per_hour=10)
    calm = generate(spec, 0, spot_nodes=["s"], nodes=["n", "s"])
    assert calm.stalls == {}
    stalling = generate(spec.model_copy(update={"engine_stalls_per_node_hour": 4.0}), 0, ["s"], ["n", "s"])
    assert set(stalling.stalls) == {"n", "s"} and all(s == 30.0 for times in stalling.stalls.values() for _, s in times)
    assert stalling.sessions == calm.sessions and stalling.preemptions == calm.preemptions
