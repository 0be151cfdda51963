"""What an engine has served, counted the way Berth's ledger should count it (the simulated and llama.cpp engines).

System tests compare Berth's token ledger with these numbers, so the rules are strict:
a request adds its prompt and completion tokens only once the whole response has been
delivered; a stream the client dropped midway is an aborted request, and the completion
tokens already sent with it are kept apart (Berth books those as lost, never hides them).
"""

from __future__ import annotations

import json
import threading
from dataclasses import asdict, dataclass
from pathlib import Path

NO_TASK = "-"  # the group of requests that came without an X-Berth-Task header


@dataclass
class UsageCounts:
    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    aborted_requests: int = 0
    aborted_prompt_tokens: int = 0
    aborted_completion_tokens: int = 0


class UsageTally:
    """Running totals overall, per model and per task; safe to read from another thread.

    With a `journal` file every request is also appended there as a JSON line and replayed
    at start, so the engine's account of what it generated survives its own restarts (as a
    real deployment's billing would) and can be compared with Berth's ledger across them.
    """

    def __init__(self, journal: Path | None = None) -> None:
        self._lock = threading.Lock()
        self._total = UsageCounts()
        self._by_model: dict[str, UsageCounts] = {}
        self._by_task: dict[str, UsageCounts] = {}
        self._journal = journal
        if journal is not None:
            journal.parent.mkdir(parents=True, exist_ok=True)
            self._replay(journal)

    def completed(self, model: str, task: str | None, prompt_tokens: int, completion_tokens: int) -> None:
        self._append("completed", model, task, prompt_tokens, completion_tokens)
        self._add_completed(model, task, prompt_tokens, completion_tokens)

    def _add_completed(self, model: str, task: str | None, prompt_tokens: int, completion_tokens: int) -> None:
        with self._lock:
            for counts in self._groups(model, task):
                counts.requests += 1
                counts.prompt_tokens += prompt_tokens
                counts.completion_tokens += completion_tokens

    def aborted(self, model: str, task: str | None, prompt_tokens: int, completion_tokens_sent: int) -> None:
        self._append("aborted", model, task, prompt_tokens, completion_tokens_sent)
        self._add_aborted(model, task, prompt_tokens, completion_tokens_sent)

    def _add_aborted(self, model: str, task: str | None, prompt_tokens: int, completion_tokens_sent: int) -> None:
        with self._lock:
            for counts in self._groups(model, task):
                counts.aborted_requests += 1
                counts.aborted_prompt_tokens += prompt_tokens
                counts.aborted_completion_tokens += completion_tokens_sent

    def snapshot(self) -> dict[str, object]:
        """The JSON body of GET /sim/usage."""
        with self._lock:
            return {
                "total": asdict(self._total),
                "by_model": {name: asdict(c) for name, c in sorted(self._by_model.items())},
                "by_task": {name: asdict(c) for name, c in sorted(self._by_task.items())},
            }

    def reset(self) -> None:
        with self._lock:
            self._total = UsageCounts()
            self._by_model.clear()
            self._by_task.clear()
            if self._journal is not None:
                self._journal.write_text("")

    def _append(self, kind: str, model: str, task: str | None, prompt_tokens: int, completion_tokens: int) -> None:
        if self._journal is None:
            return
        line = json.dumps(
            {"kind": kind, "model": model, "task": task, "prompt": prompt_tokens, "completion": completion_tokens}
        )
        with self._lock, self._journal.open("a", encoding="utf-8") as f:
            f.write(line + "\n")

    def _replay(self, journal: Path) -> None:
        if not journal.exists():
            return
        for raw in journal.read_text(encoding="utf-8").splitlines():
            try:
                entry = json.loads(raw)
            except json.JSONDecodeError:
                continue  # a line cut short by a crash: that request never finished being recorded
            add = self._add_completed if entry.get("kind") == "completed" else self._add_aborted
            add(entry["model"], entry.get("task"), int(entry["prompt"]), int(entry["completion"]))

    def _groups(self, model: str, task: str | None) -> tuple[UsageCounts, UsageCounts, UsageCounts]:
        return (
            self._total,
            self._by_model.setdefault(model, UsageCounts()),
            self._by_task.setdefault(task or NO_TASK, UsageCounts()),
        )
