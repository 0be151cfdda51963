"""Where histories to judge come from: a running Temporal namespace, or files exported from one.

Files are what `temporal workflow show --output json` and `berth replay --export` write (the proto3 JSON of a
History); a workflow id is not in that JSON, so a file's history is named by the file's stem.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

from temporalio.client import Client, WorkflowHistory

# A namespace can hold millions of closed runs: a sweep reads at most this many unless told otherwise.
DEFAULT_MAX_HISTORIES = 1000


def since_query(since: timedelta, now: datetime | None = None) -> str:
    """The visibility query for runs started or still running within `since` of now."""
    start = (now or datetime.now(UTC)) - since
    stamp = start.strftime("%Y-%m-%dT%H:%M:%SZ")
    return f'StartTime >= "{stamp}" OR ExecutionStatus = "Running"'


async def from_temporal(
    client: Client, query: str | None = None, limit: int = DEFAULT_MAX_HISTORIES
) -> AsyncIterator[WorkflowHistory]:
    """The histories of the runs the visibility query lists (all runs when None), newest first, `limit` at most."""
    count = 0
    async for execution in client.list_workflows(query):
        if count >= limit:
            return
        count += 1
        yield await client.get_workflow_handle(execution.id, run_id=execution.run_id).fetch_history()


def from_files(paths: Iterable[Path]) -> Iterator[WorkflowHistory]:
    """Histories from JSON files, or every *.json under a folder (sorted, so runs are reproducible)."""
    for path in paths:
        files = sorted(path.rglob("*.json")) if path.is_dir() else [path]
        for file in files:
            yield WorkflowHistory.from_json(_name_of(file), file.read_text())


def export(history: WorkflowHistory, folder: Path) -> Path:
    """Write a history as `temporal workflow show --output json` does, named for its workflow and run."""
    folder.mkdir(parents=True, exist_ok=True)
    first = history.events[0] if history.events else None
    run = first.workflow_execution_started_event_attributes.original_execution_run_id if first else ""
    path = folder / f"{_file_safe(history.workflow_id)}.{run[-12:] or 'run'}.history.json"
    path.write_text(json.dumps(history.to_json_dict(), separators=(",", ":")) + "\n")
    return path


def _name_of(file: Path) -> str:
    name = file.name
    for suffix in (".history.json", ".json"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def _file_safe(workflow_id: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in workflow_id)
