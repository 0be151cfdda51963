"""What the simulated engine has served, counted the way Berth's ledger should count it.

System tests compare Berth's token ledger with these numbers, so the rules are strict:
a request adds its prompt and completion tokens only once the whole response has been
delivered; a stream the client dropped midway is an aborted request, and the completion
tokens already sent with it are kept apart (Berth books those as lost, never hides them).
"""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass

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
    """Running totals overall, per model and per task; safe to read from another thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._total = UsageCounts()
        self._by_model: dict[str, UsageCounts] = {}
        self._by_task: dict[str, UsageCounts] = {}

    def completed(self, model: str, task: str | None, prompt_tokens: int, completion_tokens: int) -> None:
        with self._lock:
            for counts in self._groups(model, task):
                counts.requests += 1
                counts.prompt_tokens += prompt_tokens
                counts.completion_tokens += completion_tokens

    def aborted(self, model: str, task: str | None, prompt_tokens: int, completion_tokens_sent: int) -> None:
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

    def _groups(self, model: str, task: str | None) -> tuple[UsageCounts, UsageCounts, UsageCounts]:
        return (
            self._total,
            self._by_model.setdefault(model, UsageCounts()),
            self._by_task.setdefault(task or NO_TASK, UsageCounts()),
        )
