"""`berth replay` as an operator runs it: on exported files, on a live namespace, and on bad input."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.cli.replay import parse_duration
from orchestrator.replay.sources import since_query
from tests.conftest import ROOT

HISTORIES = Path(__file__).parent / "histories"


def _berth(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator.cli.main", "replay", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_exported_files_that_replay_exit_0_and_one_that_does_not_exits_1_naming_its_event(tmp_path: Path) -> None:
    good = HISTORIES / "v1" / "tools-and-answer.1.history.json"
    shutil.copy(good, tmp_path / "good.history.json")
    history = json.loads(good.read_text())
    scheduled = next(e for e in history["events"] if e["eventType"] == "EVENT_TYPE_ACTIVITY_TASK_SCHEDULED")
    scheduled["activityTaskScheduledEventAttributes"]["activityType"]["name"] = "berth.renamed"
    (tmp_path / "renamed.history.json").write_text(json.dumps(history))

    ok = _berth(str(tmp_path / "good.history.json"))
    assert ok.returncode == 0, ok.stderr
    assert "1 of 1 histories replay" in ok.stdout

    both = _berth(str(tmp_path), "--json")
    assert both.returncode == 1
    verdicts = {v["workflow_id"]: v for v in json.loads(both.stdout)["histories"]}
    assert verdicts["good"]["mismatch"] is None
    assert verdicts["renamed"]["mismatch"]["event_id"] == int(scheduled["eventId"])


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--since", "yesterday"], "since:"),
        (["--since", "0h"], "since:"),
        (["--limit", "0"], "limit:"),
        (["--limit", "10000000"], "limit:"),
        (["no-such-folder"], "files:"),
    ],
)
def test_bad_input_is_refused_naming_the_field(args: list[str], field: str) -> None:
    refused = _berth(*args)
    assert refused.returncode == 2
    assert refused.stderr.startswith(f"error: {field}")


def test_durations_and_the_window_query() -> None:
    assert parse_duration("90m").total_seconds() == 5400
    assert parse_duration("7d").days == 7
    assert 'ExecutionStatus = "Running"' in since_query(parse_duration("24h"))
