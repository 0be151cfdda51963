"""What a system test checks of a task's books: Berth's ledger against the engines' own usage journals."""

from __future__ import annotations

from orchestrator.engines.simulated.app import CHUNK_TOKENS
from tests.system.conftest import Stack


def assert_books_balance(stack: Stack, task_id: str) -> None:
    """The ledger equals what the engine reports it generated; no tool call ran twice."""
    ledger = stack.http.get(f"/v1/tasks/{task_id}/ledger").json()["totals"]
    engine = stack.engine_usage(task_id)
    assert ledger["calls"] == engine["requests"]
    assert ledger["prompt_tokens"] == engine["prompt_tokens"]
    assert ledger["completion_tokens"] == engine["completion_tokens"]
    runs = stack.tool_runs()
    assert runs and max(runs.values()) == 1, f"a tool call ran twice: {runs.most_common(3)}"


def assert_nothing_hidden_nothing_twice(stack: Stack, task_id: str) -> None:
    """Every settled call is one an engine completed; every token that reached Berth is booked.

    A generation cut off mid-stream may have had one more chunk on the wire, written by the engine
    into the closing connection and never read: the engine counts it, nobody received it.
    """
    ledger = stack.http.get(f"/v1/tasks/{task_id}/ledger").json()["totals"]
    engine = stack.engine_usage(task_id)
    assert ledger["calls"] <= engine["requests"] <= ledger["calls"] + 1, (ledger, engine)
    generated = engine["completion_tokens"] + engine.get("aborted_completion_tokens", 0)
    in_flight = CHUNK_TOKENS * engine.get("aborted_requests", 0)
    booked = ledger["completion_tokens"] + ledger["lost_tokens"] + ledger["kept_tokens"]
    assert booked >= generated - in_flight, (ledger, engine)
    runs = stack.tool_runs()
    assert runs and max(runs.values()) == 1, f"a tool call ran twice: {runs.most_common(3)}"
