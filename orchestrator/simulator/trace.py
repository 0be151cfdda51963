"""A recorded workload: a CSV trace of LLM calls replayed at their own times.

A trace keeps what happened (when each call was issued, its model and sizes) and not why, so tool
time is 0 and each call carries its timestamp as `not_before_s`: the simulation issues it no earlier
than the trace did, and no earlier than the end of its session's previous call.
"""

from __future__ import annotations

import csv
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from orchestrator.simulator.plan import CallPlan, SessionPlan, Workload
from orchestrator.simulator.workload import preemption_schedule

COLUMNS = ("timestamp", "model", "prompt_tokens", "output_tokens", "session_id")
_FIRST_DATA_ROW = 2  # rows are counted as a spreadsheet shows them: the header is row 1


@dataclass(frozen=True)
class _Row:
    timestamp: float
    row: int
    session_id: str
    model: str
    prompt_tokens: int
    output_tokens: int


class _RowError(ValueError):
    def __init__(self, column: str, reason: str) -> None:
        super().__init__(reason)
        self.column = column
        self.reason = reason


def read_trace(
    path: Path,
    *,
    spot_nodes: Sequence[str] = (),
    preemptions_per_node_hour: float = 0.0,
    preemption_notice_s: float = 30.0,
    seed: int = 0,
) -> Workload:
    """Reads the whole trace or raises ValueError naming file, row and column; nothing half-read.

    Columns may come in any order and extra ones are ignored. A timestamp is seconds or ISO 8601 with
    a timezone; times are made relative to the earliest call. The seed only draws the preemptions.
    """
    rows = _read_rows(path)
    start = min(r.timestamp for r in rows)
    by_session: dict[str, list[_Row]] = {}  # in order of each session's first call: sorted by arrival
    for r in sorted(rows, key=lambda r: (r.timestamp, r.row)):
        by_session.setdefault(r.session_id, []).append(r)
    sessions = [
        SessionPlan(
            session_id=session_id,
            arrival_s=calls[0].timestamp - start,
            calls=tuple(
                CallPlan(
                    model=c.model,
                    prompt_tokens=c.prompt_tokens,
                    output_tokens=c.output_tokens,
                    not_before_s=c.timestamp - start,
                )
                for c in calls
            ),
        )
        for session_id, calls in by_session.items()
    ]
    duration_s = max(r.timestamp for r in rows) - start + 1.0
    preemptions = preemption_schedule(
        spot_nodes, preemptions_per_node_hour, preemption_notice_s, duration_s, random.Random(seed)
    )
    return Workload(sessions=tuple(sessions), duration_s=duration_s, preemptions=preemptions)


def _read_rows(path: Path) -> list[_Row]:
    try:
        with path.open(newline="", encoding="utf-8-sig") as f:  # -sig: spreadsheets often write a BOM
            records = list(csv.reader(f))
    except OSError as e:
        raise ValueError(f"{path}: cannot read the trace: {e.strerror}") from e
    except (UnicodeDecodeError, csv.Error) as e:
        raise ValueError(f"{path}: not a UTF-8 CSV file: {e}") from e
    if not records:
        raise ValueError(f"{path}: empty file: no header row")
    header = [name.strip().lower() for name in records[0]]
    for column in COLUMNS:
        if column not in header:
            raise ValueError(f"{path}: row 1: column {column!r}: missing from the header")
    index = {column: header.index(column) for column in COLUMNS}
    rows: list[_Row] = []
    for number, record in enumerate(records[1:], start=_FIRST_DATA_ROW):
        if not any(cell.strip() for cell in record):
            continue  # a blank line, as spreadsheets leave at the end
        cells = {column: record[i].strip() if i < len(record) else "" for column, i in index.items()}
        try:
            rows.append(_parse_row(cells, number))
        except _RowError as e:
            raise ValueError(f"{path}: row {number}: column {e.column!r}: {e.reason}") from None
    if not rows:
        raise ValueError(f"{path}: empty file: no data rows after the header")
    return rows


def _parse_row(cells: dict[str, str], number: int) -> _Row:
    for column in ("model", "session_id"):
        if not cells[column]:
            raise _RowError(column, "empty")
    return _Row(
        timestamp=_timestamp(cells["timestamp"]),
        row=number,
        session_id=cells["session_id"],
        model=cells["model"],
        prompt_tokens=_tokens("prompt_tokens", cells["prompt_tokens"]),
        output_tokens=_tokens("output_tokens", cells["output_tokens"]),
    )


def _timestamp(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        if not math.isfinite(seconds):
            raise _RowError("timestamp", f"not a finite number of seconds: {text!r}")
        return seconds
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise _RowError("timestamp", f"neither seconds nor an ISO 8601 time: {text!r}") from None
    if moment.tzinfo is None:
        raise _RowError("timestamp", f"an ISO 8601 time needs a timezone (e.g. Z or +00:00): {text!r}")
    return moment.timestamp()


def _tokens(column: str, text: str) -> int:
    try:
        count = int(text)
    except ValueError:
        raise _RowError(column, f"not a whole number of tokens: {text!r}") from None
    if count < 0:
        raise _RowError(column, f"negative: {count}")
    return count
