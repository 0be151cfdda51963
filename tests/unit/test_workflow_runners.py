"""Where workflow code runs inside Temporal's sandbox and where not.

The worker runs it outside (the sandbox re-ran every workflows/ module for each task the worker took up and
wrapped each activation: 6-16% of the worker's CPU under load, docs/performance.md). What keeps the code
deterministic is the judge: every history a test makes is replayed inside the sandbox, where a call the sandbox
forbids (the clock, randomness, files, threads) fails the replay and so the test.
"""

from __future__ import annotations

from pathlib import Path

from temporalio.client import Client
from temporalio.worker import UnsandboxedWorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from orchestrator.config import BerthConfig
from orchestrator.replay.judge import replayer
from orchestrator.store import Store
from orchestrator.worker import build_worker


def test_the_judge_replays_inside_the_sandbox() -> None:
    runner = replayer().config()["workflow_runner"]

    assert isinstance(runner, SandboxedWorkflowRunner)
    restricted_datetime = runner.restrictions.invalid_module_members.children["datetime"].children["datetime"]
    assert "now" in restricted_datetime.use  # workflow.now() is the only clock workflow code may read


async def test_the_worker_runs_workflow_code_outside_the_sandbox(tmp_path: Path, temporal_client: Client) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'berth.db'}")
    worker = build_worker(temporal_client, store, BerthConfig(data_dir=tmp_path), task_queue="runner-check")

    assert isinstance(worker.config()["workflow_runner"], UnsandboxedWorkflowRunner)
