"""What an MCP wait reports of a step's text: only what is new, and a restart said as one."""

from __future__ import annotations

from orchestrator.mcp_server.waiting import RESTARTED, WrittenSoFar
from sdk import Writing


def writing(step: int, text: str) -> Writing:
    return Writing(task_id="t", step=step, text=text)


def test_each_report_carries_only_the_new_text_and_a_restart_says_so() -> None:
    seen = WrittenSoFar()
    assert seen.since_last(writing(1, "Report")) == "Report"
    assert seen.since_last(writing(1, "Report on H100")) == " on H100"
    assert seen.since_last(writing(1, "Report on H100")) == ""
    assert seen.since_last(writing(1, "Summary")) == f"{RESTARTED}Summary"  # the retry did not continue
    assert seen.since_last(writing(2, "Next")) == "Next"  # a new step is not a restart
