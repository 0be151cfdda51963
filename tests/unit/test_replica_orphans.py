"""Replica processes a SIGKILLed node agent left behind are stopped by the next agent, and only they."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from orchestrator.engines.replicas.processes import ChildProcessEngine, launch, pid_file, stop_orphans
from orchestrator.engines.replicas.protocol import ReplicaHandle, ReplicaSpec

SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)"]


def _launch(log_dir: Path, name: str) -> tuple[subprocess.Popen[bytes], Path]:
    log = log_dir / f"{name}.log"
    return launch(SLEEPER, dict(os.environ), log), log


def test_a_replica_left_running_is_stopped_by_the_next_agent(tmp_path: Path) -> None:
    orphan, log = _launch(tmp_path, "r-1")
    pid, started = pid_file(log).read_text().split()
    assert int(pid) == orphan.pid and int(started) > 0
    assert stop_orphans(tmp_path) == [orphan.pid]
    assert orphan.wait(10) == -9 and not pid_file(log).exists()
    assert stop_orphans(tmp_path) == []


def test_a_pid_taken_by_another_process_since_is_left_alone(tmp_path: Path) -> None:
    bystander = subprocess.Popen(SLEEPER, start_new_session=True)
    try:
        (tmp_path / "r-old.pid").write_text(f"{bystander.pid} 12345\n")  # the replica that had this pid is gone
        (tmp_path / "r-garbled.pid").write_text("not a pid\n")
        assert stop_orphans(tmp_path) == []
        assert bystander.poll() is None and not list(tmp_path.glob("*.pid"))
    finally:
        bystander.kill()
        bystander.wait()


async def test_a_replica_stopped_by_its_agent_leaves_no_pid_file(tmp_path: Path) -> None:
    process, log = _launch(tmp_path, "r-2")
    handle = ReplicaHandle(
        spec=ReplicaSpec(replica_id="r-2", model="m", gpu_indexes=(0,)),
        base_url="http://127.0.0.1:1/v1",
        process=process,
        log_path=log,
    )
    await ChildProcessEngine().stop(handle, grace_s=5)
    assert process.poll() is not None and not pid_file(log).exists()
