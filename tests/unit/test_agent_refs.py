"""`berth worker --agents module:attr`: malformed references are refused with the reason."""

from __future__ import annotations

import pytest

from orchestrator.cli.main import main
from orchestrator.cli.tool_worker import AgentRefError, load_agents


def test_a_good_reference_loads_the_agents() -> None:
    agents = load_agents("orchestrator.demo.sample_agents:ALL")
    assert [a.name for a in agents] == ["research", "coordinator", "writer", "ask", "essay"]
    assert [a.name for a in load_agents("orchestrator.demo.sample_agents:research")] == ["research"]


@pytest.mark.parametrize(
    "ref, reason",
    [
        ("no_colon_here", "module:attr"),
        ("orchestrator.demo.sample_agents:", "module:attr"),
        ("not.a.module:thing", "cannot import"),
        ("orchestrator.demo.sample_agents:missing", "no attribute"),
        ("orchestrator.demo.sample_agents:KNOWLEDGE", "not an Agent"),
    ],
)
def test_bad_references_say_why(ref: str, reason: str) -> None:
    with pytest.raises(AgentRefError, match=reason):
        load_agents(ref)


def test_the_cli_exits_2_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["worker", "--agents", "no_colon_here"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: agents:")
