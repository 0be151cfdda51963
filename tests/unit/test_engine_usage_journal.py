"""The engine's usage journal: what it generated survives its own restart, exactly."""

from __future__ import annotations

from pathlib import Path

from orchestrator.engines.simulated.usage import UsageTally


def test_a_restarted_tally_replays_its_journal(tmp_path: Path) -> None:
    journal = tmp_path / "usage.jsonl"
    first = UsageTally(journal=journal)
    first.completed("m", "t1", 100, 20)
    first.aborted("m", "t1", 90, 7)
    first.completed("m", None, 5, 5)

    again = UsageTally(journal=journal)
    assert again.snapshot() == first.snapshot()
    by_task = again.snapshot()["by_task"]
    assert by_task["t1"]["requests"] == 1 and by_task["t1"]["aborted_completion_tokens"] == 7

    with journal.open("a") as f:
        f.write('{"kind": "completed", "model"')  # a line cut short by a crash
    assert UsageTally(journal=journal).snapshot() == first.snapshot()

    again.reset()
    assert UsageTally(journal=journal).snapshot()["total"]["requests"] == 0
