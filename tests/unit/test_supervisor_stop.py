"""Stopping `berth up`'s children: reverse start order, with the neighbours of one stop group together."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from orchestrator.stack import supervisor as supervision
from orchestrator.stack.supervisor import ChildSpec, Supervisor

# On SIGTERM: leave a mark, then exit only once every sibling named in argv has left its own,
# so a child is SIGKILLed unless its siblings were told to stop at the same time.
WAITS_FOR_SIBLINGS = """
import os, signal, sys, time
marks, me, siblings = sys.argv[1], sys.argv[2], sys.argv[3:]
def on_term(*_):
    open(os.path.join(marks, me), "w").close()
    with open(os.path.join(marks, "order"), "a") as order:
        order.write(me + "\\n")
    while not all(os.path.exists(os.path.join(marks, s)) for s in siblings):
        time.sleep(0.02)
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
open(os.path.join(marks, me + ".up"), "w").close()
while True:
    time.sleep(0.1)
"""


def _child(marks: Path, name: str, *siblings: str, group: str | None = None) -> ChildSpec:
    return ChildSpec(name, [sys.executable, "-c", WAITS_FOR_SIBLINGS, str(marks), name, *siblings], stop_group=group)


def test_a_stop_group_stops_together_and_the_rest_in_reverse_start_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(supervision, "STOP_GRACE_S", 3.0)
    marks = tmp_path / "marks"
    marks.mkdir()
    stack = Supervisor(tmp_path / "logs", tmp_path / "run", report=lambda _: None)
    specs = [
        _child(marks, "temporal"),
        _child(marks, "worker"),
        _child(marks, "node-a", "node-b", "tools", group="edge"),
        _child(marks, "node-b", "node-a", "tools", group="edge"),
        _child(marks, "tools", "node-a", "node-b", group="edge"),
    ]
    for spec in specs:
        stack.start(spec)
    while not all((marks / f"{s.name}.up").exists() for s in specs):
        time.sleep(0.02)
    stack.stop()
    assert [c.process.returncode for c in stack.children if c.process] == [0] * 5  # none had to be killed
    order = (marks / "order").read_text().split()
    assert set(order[:3]) == {"node-a", "node-b", "tools"} and order[3:] == ["worker", "temporal"]


def test_a_deferred_child_starts_the_first_time_its_condition_holds(tmp_path: Path) -> None:
    reports: list[str] = []
    installed = {"yes": False}
    supervisor = Supervisor(tmp_path / "logs", tmp_path / "run", report=reports.append)
    supervisor.start(
        ChildSpec(
            "late",
            [sys.executable, "-c", "import time; time.sleep(30)"],
            start_when=lambda: installed["yes"],
            started_because="the engine is installed",
        )
    )
    try:
        supervisor.check()
        assert supervisor.pid("late") is None and reports == []
        installed["yes"] = True
        supervisor.check()
        assert supervisor.pid("late") is not None
        assert reports == ["late starts: the engine is installed"]
        installed["yes"] = False  # started once, it is supervised as any child: the condition is not asked again
        supervisor.check()
        assert supervisor.pid("late") is not None and len(reports) == 1
    finally:
        supervisor.stop()
