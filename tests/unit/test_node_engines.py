"""Which engines a node registers: what --engines names (each able to run here), or every one that can."""

from __future__ import annotations

import pytest

from orchestrator.cli.node import NodeSetupError, _engines
from orchestrator.engines.replicas import SglangReplicaEngine, SimulatedReplicaEngine, VllmReplicaEngine
from orchestrator.engines.replicas.unavailable import UnavailableReplicaEngine


@pytest.fixture
def built(tmp_path):
    return {
        "simulated": SimulatedReplicaEngine(log_dir=tmp_path),
        "vllm": VllmReplicaEngine(executable="no-such-vllm-here", log_dir=tmp_path),
        "sglang": SglangReplicaEngine(log_dir=tmp_path),
        "llama.cpp": UnavailableReplicaEngine("llama.cpp", "llama-cpp-python is not installed"),
    }


def test_by_default_a_node_registers_only_the_engines_that_can_run_on_it(built) -> None:
    assert _engines(None, built) == ["simulated"]


def test_named_engines_are_registered_once_each_in_the_order_given(built) -> None:
    assert _engines("simulated, simulated", built) == ["simulated"]


@pytest.mark.parametrize(
    ("flag", "reason"),
    [
        ("llama.cpp", "'llama.cpp' cannot run here: llama-cpp-python is not installed"),
        ("vllm", "'vllm' cannot run here: 'no-such-vllm-here' is not on PATH"),
        ("openai-compatible", "needs --external-url"),
        ("sglang", "the sglang package is not installed"),
        ("tgi", "'tgi' is not an engine"),
        (" , ", "name at least one engine"),
    ],
)
def test_an_engine_that_cannot_run_here_is_refused_by_name(built, flag: str, reason: str) -> None:
    with pytest.raises(NodeSetupError, match="^engines: ") as refused:
        _engines(flag, built)
    assert reason in str(refused.value)
