"""The reconciler's rounds are bounded: at most a batch of unfinished tasks each, least recently updated first, the
next round going on where one stopped, every tenant's tasks covered, finished ones never asked about, a few
questions to Temporal in flight at once, and one control-plane replica sweeping at a time.

Temporal's answers are stubbed here (what they are is the verdict's test and the API suite's); the store is real.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta

import pytest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from orchestrator.reconcile import Reconciler, reconciler
from orchestrator.reconcile.verdict import Finding, Missing, Running
from orchestrator.store import Store
from sdk import Spend, TaskState, TaskStatus

T0 = datetime(2026, 12, 5, 21, 0, tzinfo=UTC)
SPEC = json.dumps({"agent": "writer", "input": "hello", "budget": {"tokens": 1000}})


class AskedTemporal:
    """Stands in for read_workflow: records who was asked, and how many questions were in flight at once."""

    def __init__(self, unanswered: frozenset[str] = frozenset()) -> None:
        self.asked: list[str] = []
        self.in_flight = self.most_in_flight = 0
        self.unanswered = unanswered

    async def __call__(self, _client: Client, task_id: str, _timeout: timedelta) -> Finding:
        self.asked.append(task_id)
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await asyncio.sleep(0.001)
            if task_id in self.unanswered:
                raise RPCError("unavailable", RPCStatusCode.UNAVAILABLE, b"")
            return Running() if task_id.endswith("-0") else Missing()
        finally:
            self.in_flight -= 1


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch) -> AskedTemporal:
    stub = AskedTemporal()
    monkeypatch.setattr(reconciler, "read_workflow", stub)
    return stub


async def _no_client() -> Client:
    return None  # type: ignore[return-value]  # the stubbed read_workflow never uses it


def _task(store: Store, task_id: str, tenant: str, age_s: float, status: TaskStatus = TaskStatus.running) -> None:
    state = TaskState(
        task_id=task_id,
        agent="writer",
        agent_version="v1",
        model="m",
        tenant=tenant,
        status=status,
        max_steps=10,
        spend=Spend(token_limit=1000),
        updated_at=T0 - timedelta(seconds=age_s),
    )
    store.tasks.create(task_id, SPEC, state)


def _reconciler(store: Store, batch: int, holder: str = "replica-a") -> Reconciler:
    return Reconciler(store, _no_client, holder=holder, every_s=1.0, batch=batch)


async def test_rounds_take_a_batch_each_least_recently_updated_first_and_go_on_where_the_last_stopped(
    store: Store, asked: AskedTemporal
) -> None:
    for n in range(7):  # acme-6 is the oldest, acme-0 the newest; every other one is globex's
        _task(store, f"{'acme' if n % 2 == 0 else 'globex'}-{n}", "acme" if n % 2 == 0 else "globex", age_s=n)
    _task(store, "done-old", "acme", age_s=1000, status=TaskStatus.completed)
    _task(store, "failed-old", "globex", age_s=999, status=TaskStatus.failed)
    sweeping = _reconciler(store, batch=3)

    rounds = [await sweeping.sweep() for _ in range(4)]

    assert [sorted(r.compared) for r in rounds] == [
        ["acme-4", "acme-6", "globex-5"],
        ["acme-2", "globex-1", "globex-3"],
        ["acme-0"],
        ["acme-4", "acme-6", "globex-5"],  # lapped: the oldest again
    ]
    assert [r.lapped for r in rounds] == [False, False, True, False]
    assert asked.asked[:3] == ["acme-6", "globex-5", "acme-4"]  # started oldest first
    assert "done-old" not in asked.asked and "failed-old" not in asked.asked


async def test_a_round_asks_temporal_a_few_questions_at_once_and_leaves_the_unanswered_for_later(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    stub = AskedTemporal(unanswered=frozenset({"t-5", "t-17"}))
    monkeypatch.setattr(reconciler, "read_workflow", stub)
    for n in range(40):
        _task(store, f"t-{n}", "acme", age_s=n)

    done = await _reconciler(store, batch=40).sweep()

    assert len(stub.asked) == 40 and 1 < stub.most_in_flight <= reconciler.CONCURRENCY
    assert sorted(done.unanswered) == ["t-17", "t-5"] and len(done.compared) == 38
    assert done.stuck == done.recovered == done.ended == []  # nothing was stuck or ended


async def test_one_replica_sweeps_at_a_time(store: Store, asked: AskedTemporal) -> None:
    _task(store, "t-1", "acme", age_s=1)
    leader, other = _reconciler(store, batch=5), _reconciler(store, batch=5, holder="replica-b")

    assert (await leader.round()) is not None
    assert await other.round() is None
    assert asked.asked == ["t-1"]
    assert (await leader.round()) is not None  # it renews its lead


def test_a_round_needs_a_batch_and_a_period() -> None:
    with pytest.raises(ValueError, match="batch"):
        Reconciler(None, _no_client, holder="x", batch=0)  # type: ignore[arg-type]  # refused before the store is used
