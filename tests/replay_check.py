"""The suite's replay gate: every workflow a test ran must replay on the code under test.

Each test that talks to Temporal (the `temporal_client` fixture, every `berth up` stack) ends by replaying the
histories of the runs it started with Temporal's Replayer, configured as the orchestrator worker is; a history
that does not replay fails the test, naming the workflow and the first event the code does not reproduce.
With BERTH_EXPORT_HISTORIES=<folder> set, the histories are also written there: that is how the recorded
corpus under tests/replay/histories was collected.
"""

from __future__ import annotations

import asyncio
import os
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from orchestrator.replay.judge import WORKER_WORKFLOWS, judge
from orchestrator.replay.sources import export

EXPORT_ENV = "BERTH_EXPORT_HISTORIES"
# A test's own runs: more than any test starts; a stack's whole namespace is read at its stop.
MAX_RUNS_PER_CHECK = 5000
# Histories this test process has replayed (the suite's summary line adds up every process's).
replayed_here = 0
_BERTH_TYPES = {getattr(w, "__temporal_workflow_definition").name for w in WORKER_WORKFLOWS}


def started_since(when: datetime) -> str:
    return f'StartTime >= "{when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")}"'


async def assert_histories_replay(client: Client, query: str | None, label: str) -> int:
    """Replay the runs of Berth's workflow types that `query` lists; AssertionError naming each that does not.
    Returns how many were replayed."""
    histories = []
    async for execution in client.list_workflows(query, limit=MAX_RUNS_PER_CHECK):
        if execution.workflow_type not in _BERTH_TYPES:
            continue  # a test's own workflow: not Berth's code
        handle = client.get_workflow_handle(execution.id, run_id=execution.run_id)
        histories.append(await handle.fetch_history())
    folder = os.environ.get(EXPORT_ENV)
    if folder:
        for history in histories:
            export(history, Path(folder) / _file_safe(label))
    global replayed_here
    failing = [v for v in await judge(histories) if not v.replays]
    replayed_here += len(histories)
    assert not failing, f"{len(failing)} of {len(histories)} histories of {label} do not replay:\n" + "\n".join(
        v.describe() for v in failing
    )
    return len(histories)


def assert_namespace_replays(address: str, label: str) -> int:
    """Every history a Temporal frontend holds, from synchronous code: on a thread of its own, since the caller's
    thread may already run an event loop (Playwright's sync API keeps one in the browser suites)."""

    async def replay_all() -> int:
        client = await Client.connect(address, data_converter=pydantic_data_converter)
        return await assert_histories_replay(client, None, label)

    with ThreadPoolExecutor(max_workers=1) as thread:
        return thread.submit(asyncio.run, replay_all()).result()


def _file_safe(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)[:120]
