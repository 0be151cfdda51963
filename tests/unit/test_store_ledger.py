"""The token ledger counts each (task, step, attempt, kind) once, whoever writes it and however often."""

from __future__ import annotations

import threading

import pytest

from orchestrator.store import LedgerTotals, Store
from sdk.wire.ledger import LedgerEntry

pytestmark = pytest.mark.postgresql  # the store's SQL must mean the same on SQLite and PostgreSQL


def _entry(task_id: str = "t", step: int = 1, attempt: int = 1, *, prompt: int = 100, completion: int = 20,
           cost: float = 0.01, kind: str = "settled") -> LedgerEntry:  # fmt: skip
    return LedgerEntry(
        task_id=task_id, step=step, attempt=attempt, model="m", prompt_tokens=prompt, completion_tokens=completion,
        cost_usd=cost, ttft_s=0.1, duration_s=0.5, served_by="node-1", kind=kind,
    )  # fmt: skip


def test_a_key_is_recorded_once(store: Store) -> None:
    assert store.ledger.record(_entry()) is True
    assert store.ledger.record(_entry()) is False
    assert store.ledger.record(_entry(prompt=999)) is False  # same key, other numbers: still the first write
    assert store.ledger.entries("t") == [_entry()]
    assert store.ledger.record(_entry(attempt=2)) is True
    assert store.ledger.record(_entry(attempt=1, kind="lost", prompt=0, completion=7, cost=0.0)) is True
    assert len(store.ledger.entries("t")) == 3


def test_two_processes_on_one_file_see_one_ledger(db_url: str) -> None:
    worker, server = Store.open(db_url), Store.open(db_url)
    assert worker.ledger.record(_entry()) is True
    assert server.ledger.record(_entry()) is False
    assert server.ledger.totals("t").calls == 1
    worker.close()
    server.close()


def test_racing_writers_of_one_key_count_it_once(db_url: str) -> None:
    stores = [Store.open(db_url) for _ in range(4)]
    results: list[bool] = []
    barrier = threading.Barrier(len(stores))

    def write(s: Store) -> None:
        barrier.wait()
        results.append(s.ledger.record(_entry()))

    threads = [threading.Thread(target=write, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [False, False, False, True]
    assert len(stores[0].ledger.entries("t")) == 1
    for s in stores:
        s.close()


def test_totals_separate_answered_calls_from_lost_attempts(store: Store) -> None:
    store.ledger.record(_entry(step=1, attempt=1, kind="lost", prompt=0, completion=40, cost=0.0))
    store.ledger.record(_entry(step=1, attempt=2, prompt=100, completion=20, cost=0.01))
    store.ledger.record(_entry(step=2, attempt=1, prompt=150, completion=30, cost=0.02))
    store.ledger.record(_entry(task_id="other", prompt=5, completion=5, cost=1.0))

    totals = store.ledger.totals("t")
    assert totals == LedgerTotals(
        calls=2, prompt_tokens=250, completion_tokens=50, lost_tokens=40, cost_usd=pytest.approx(0.03)
    )
    assert totals.tokens == 340
    assert store.ledger.totals("nobody") == LedgerTotals()

    by_task = store.ledger.totals_by_tasks(["t", "other", "nobody"])
    assert set(by_task) == {"t", "other", "nobody"}
    assert by_task["t"] == totals
    assert by_task["other"].calls == 1 and by_task["other"].cost_usd == pytest.approx(1.0)
    assert by_task["nobody"] == LedgerTotals()


def test_entries_come_back_by_step_then_attempt(store: Store) -> None:
    store.ledger.record(_entry(step=2))
    store.ledger.record(_entry(step=1, attempt=2))
    store.ledger.record(_entry(step=1, attempt=1))
    assert [(e.step, e.attempt) for e in store.ledger.entries("t")] == [(1, 1), (1, 2), (2, 1)]
    assert store.ledger.entries("nobody") == []
