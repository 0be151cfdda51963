"""A small process supervisor: start children, restart the ones that die, stop all cleanly.

A child that exits while the stack is up is reported and restarted (with a growing pause,
so a child that crashes at once does not spin; one that had been running a while starts
over at the shortest pause, so crashes hours apart never add up to the longest). On
shutdown, children stop in reverse start order — SIGTERM, then SIGKILL after a grace
period — so workers drain before the Temporal server they talk to goes away; neighbours of one
stop group (the GPU nodes and the tool worker) stop together.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from sdk.secret_settings import FILE_SUFFIX

RESTART_BACKOFF_S = (1.0, 2.0, 5.0, 10.0, 30.0)
# A child that ran this long was healthy, not crash-looping: its next restart is the first again.
# Longer than the longest pause, so a child that dies a little after each start still backs off.
STABLE_AFTER_S = 60.0
STOP_GRACE_S = 10.0


def terminate(processes: list[subprocess.Popen], grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM every one still running, together; SIGKILL whoever has not exited after `grace_s`."""
    running = [p for p in processes if p.poll() is None]
    for process in running:
        process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for process in running:
        try:
            process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@dataclass
class ChildSpec:
    name: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    # Neighbours (in start order) of one stop group stop together: they do not depend on each other,
    # so waiting for each in turn would only add their drain times up.
    stop_group: str | None = None
    # A child that can only run once something outside the stack is done (the CPU node, once llama.cpp's
    # build is installed): checked at every `check`, the child starts the first time it holds.
    start_when: Callable[[], bool] | None = None
    started_because: str = ""  # said when a deferred child starts


@dataclass
class _Child:
    spec: ChildSpec
    process: subprocess.Popen | None = None
    restarts: int = 0
    next_start_at: float = 0.0
    started_at: float = 0.0
    deferred: bool = False  # waiting for its spec's start_when


class Supervisor:
    def __init__(self, log_dir: Path, pid_dir: Path, report: Callable[[str], None] = print) -> None:
        self.log_dir = log_dir
        self.pid_dir = pid_dir
        self.report = report
        self.children: list[_Child] = []
        self.stopping = False
        log_dir.mkdir(parents=True, exist_ok=True)
        pid_dir.mkdir(parents=True, exist_ok=True)

    def start(self, spec: ChildSpec) -> None:
        child = _Child(spec)
        self.children.append(child)
        if spec.start_when is None or spec.start_when():
            self._launch(child)
        else:
            child.deferred = True

    def pid(self, name: str) -> int | None:
        for child in self.children:
            if child.spec.name == name and child.process is not None:
                return child.process.pid
        return None

    def check(self) -> None:
        """Restart children that died; call this regularly from the main loop."""
        now = time.monotonic()
        for child in self.children:
            proc = child.process
            if proc is not None and proc.poll() is not None:
                if now - child.started_at >= STABLE_AFTER_S:
                    child.restarts = 0
                delay = RESTART_BACKOFF_S[min(child.restarts, len(RESTART_BACKOFF_S) - 1)]
                self.report(
                    f"! {child.spec.name} exited with code {proc.returncode}; restarting in {delay:.0f}s "
                    f"(log: {self._log_path(child.spec)})"
                )
                child.process = None
                child.restarts += 1
                child.next_start_at = now + delay
            if child.deferred and not self.stopping:
                assert child.spec.start_when is not None
                if not child.spec.start_when():
                    continue
                child.deferred = False
                self.report(f"{child.spec.name} starts: {child.spec.started_because or 'it can run now'}")
            if child.process is None and now >= child.next_start_at and not self.stopping:
                self._launch(child)

    def stop(self) -> None:
        self.stopping = True
        for batch in _stop_batches(list(reversed(self.children))):
            terminate([c.process for c in batch if c.process is not None])

    def _launch(self, child: _Child) -> None:
        log = open(self._log_path(child.spec), "ab")
        env = {**child_environment(os.environ, child.spec.env), "PYTHONUNBUFFERED": "1"}
        # Own process group: Ctrl-C in the terminal reaches the supervisor only, which then
        # stops children in order instead of all of them dying at once.
        child.process = subprocess.Popen(
            child.spec.argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        child.started_at = time.monotonic()
        log.close()
        # Operators (and the failure tests) find a child to signal here: <data>/run/<name>.pid.
        (self.pid_dir / f"{child.spec.name}.pid").write_text(f"{child.process.pid}\n")

    def _log_path(self, spec: ChildSpec) -> Path:
        return self.log_dir / f"{spec.name}.log"


def _stop_batches(children: list[_Child]) -> list[list[_Child]]:
    """Runs of neighbours that share a stop group, and every other child alone, in the order given."""
    batches: list[list[_Child]] = []
    for child in children:
        group = child.spec.stop_group
        if batches and group is not None and batches[-1][0].spec.stop_group == group:
            batches[-1].append(child)
        else:
            batches.append([child])
    return batches


def python_module(module: str, *args: str) -> list[str]:
    return [sys.executable, "-m", module, *args]


def child_environment(inherited: Mapping[str, str], given: Mapping[str, str]) -> dict[str, str]:
    """This process's environment with the child's own variables over it. A variable given to the child replaces
    the `_FILE` form of it this process inherited (BERTH_JOIN_TOKEN over BERTH_JOIN_TOKEN_FILE): the child would
    refuse to start with both set."""
    kept = {k: v for k, v in inherited.items() if not (k.endswith(FILE_SUFFIX) and k[: -len(FILE_SUFFIX)] in given)}
    return {**kept, **given}
