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
    """Every settled call is one an engine completed; every token that reached Berth is booked
    (`check_nothing_hidden`); no tool call ran twice."""
    ledger = stack.http.get(f"/v1/tasks/{task_id}/ledger").json()["totals"]
    check_nothing_hidden(ledger, stack.engine_usage(task_id))
    runs = stack.tool_runs()
    assert runs and max(runs.values()) == 1, f"a tool call ran twice: {runs.most_common(3)}"


def check_nothing_hidden(ledger: dict, engine: dict) -> None:
    """A task's ledger totals against what its engines journaled, when a generation may have been cut off.

    A generation cut off mid-stream may have had one more chunk on the wire, written by the engine
    into the closing connection and never read: the engine counts it, nobody received it. The engine
    journals that request as aborted, or as completed when it wrote its last chunk before it saw the
    node leave (it tallies before its last write): then it is the one request no call settled. Either
    way it may be short of the engine's count by that chunk, and by nothing else.
    """
    assert ledger["calls"] <= engine["requests"] <= ledger["calls"] + 1, (ledger, engine)
    cut = engine.get("aborted_requests", 0) + engine["requests"] - ledger["calls"]
    generated = engine["completion_tokens"] + engine.get("aborted_completion_tokens", 0)
    booked = ledger["completion_tokens"] + ledger["lost_tokens"] + ledger["kept_tokens"]
    assert booked >= generated - CHUNK_TOKENS * cut, (ledger, engine)


def assert_no_step_finished_twice(events: list) -> None:
    """Each step is checkpointed once; a step's model call runs again only on a new placement (its reply was
    lost with its node: booked, never received), never as a repeat of a finished step."""
    finished = [e.data["step"] for e in events if e.kind == "step"]
    assert finished == sorted(set(finished)), f"a finished step was recorded twice: {finished}"
    calls: dict[int, list[int]] = {}
    for e in events:
        if e.kind == "llm_call":
            calls.setdefault(e.data["step"], []).append(e.data["attempt"])
    for step, attempts in calls.items():
        placements = [a // 100 for a in attempts]
        assert placements == sorted(set(placements)), f"step {step} called twice on one placement: {attempts}"


def assert_calls_booked_once(stack: Stack, task_id: str, calls: int) -> dict:
    """An own loop's task: its ledger holds `calls` calls, each served once by the fleet's replicas (nothing
    generated or booked twice, a replayed call neither). Returns the ledger's totals."""
    totals = stack.http.get(f"/v1/tasks/{task_id}/ledger").json()["totals"]
    engine = stack.engine_usage(task_id)
    assert totals["calls"] == engine["requests"] == calls, (totals, engine)
    assert totals["prompt_tokens"] == engine["prompt_tokens"]
    assert totals["completion_tokens"] == engine["completion_tokens"]
    return totals
