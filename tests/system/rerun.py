"""A loop killed mid-tool and run again, as the own-loop system tests do it to a script of each client: the first
run's second lookup is cut by SIGKILL, the second run goes on from what the task holds."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from tests.conftest import ROOT
from tests.system.conftest import Stack, wait_until

# What the journal reads after such a pair of runs: the first lookup kept (not run again), the second cut mid-call
# (it never reported, so it ran again).
JOURNAL_AFTER_RERUN = [
    "start H100 bandwidth",
    "done H100 bandwidth",
    "start A100 bandwidth",
    "start A100 bandwidth",
    "done A100 bandwidth",
]


def kill_mid_tool_and_run_again(stack: Stack, slow: list[str], fast: list[str], journal: Path, task_id: str) -> str:
    """Run `slow` (its lookups take long enough to kill it inside the second), SIGKILL it there, check the task
    still runs at step 2, then run `fast` to its end; returns what `fast` printed."""
    first = subprocess.Popen(slow, env=stack.env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_until(
        lambda: "start A100 bandwidth" in journal.read_text() or first.poll() is not None,
        300,
        "the loop to reach its second tool call",
    )
    assert first.poll() is None, first.stderr.read()[-3000:] if first.stderr else ""
    os.kill(first.pid, signal.SIGKILL)
    first.wait(timeout=30)
    cut = stack.http.get(f"/v1/tasks/{task_id}").json()
    assert cut["status"] == "running" and cut["step"] == 2

    again = subprocess.run(fast, env=stack.env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert journal.read_text().splitlines() == JOURNAL_AFTER_RERUN
    return again.stdout
