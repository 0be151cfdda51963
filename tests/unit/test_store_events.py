"""The event log: a global, increasing seq that readers page through per task."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

import pytest

from orchestrator.store import Store
from sdk import TaskStatus

pytestmark = pytest.mark.postgresql  # the store's SQL must mean the same on SQLite and PostgreSQL


def test_events_come_back_in_order_per_task(store: Store, db_url: str) -> None:
    other = Store.open(db_url)  # the worker and the server interleave their writes
    seqs = []
    for i in range(6):
        writer = store if i % 2 else other
        seqs.append(writer.events.append("t1", "step", {"step": i}))
        writer.events.append("t2", "step", {"step": i})
    assert seqs == sorted(seqs) and len(set(seqs)) == 6

    events = store.events.read("t1")
    assert [e.seq for e in events] == seqs
    assert [e.data["step"] for e in events] == list(range(6))
    assert {e.task_id for e in events} == {"t1"}
    assert all(e.at.tzinfo is not None for e in events)

    assert [e.data["step"] for e in store.events.read("t1", after_seq=seqs[2])] == [3, 4, 5]
    assert [e.data["step"] for e in store.events.read("t1", after_seq=seqs[2], limit=2)] == [3, 4]
    assert store.events.read("t1", after_seq=seqs[-1]) == []
    assert store.events.read("nobody") == []
    other.close()


def test_event_data_round_trips_as_json(store: Store) -> None:
    at = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
    seq = store.events.append("t", "state", {"status": TaskStatus.running, "at": at, "nested": {"a": [1, None]}})
    (event,) = store.events.read("t")
    assert event.seq == seq and event.kind == "state"
    assert event.data == {"status": "running", "at": "2030-01-02T03:04:05Z", "nested": {"a": [1, None]}}


def test_a_follower_reading_while_writers_append_sees_every_event(db_url: str) -> None:
    # On PostgreSQL a seq is drawn at INSERT and seen at COMMIT: without one writer per task at a time, a
    # follower could read past a seq whose row commits a moment later, and never see it.
    writers = [Store.open(db_url) for _ in range(4)]  # the worker's activity threads and the API server
    follower = Store.open(db_url)
    written: list[int] = []
    seen: list[int] = []
    done = threading.Event()

    def write(store: Store) -> None:
        for i in range(50):
            written.append(store.events.append("t", "step", {"step": i}))

    def follow() -> None:
        after = 0
        while True:
            finished = done.is_set()
            batch = follower.events.read("t", after_seq=after)
            seen.extend(e.seq for e in batch)
            after = batch[-1].seq if batch else after
            if finished and not batch:
                return

    reader = threading.Thread(target=follow)
    reader.start()
    threads = [threading.Thread(target=write, args=(s,)) for s in writers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    done.set()
    reader.join()
    assert sorted(seen) == sorted(written) and len(seen) == 200
    for s in [*writers, follower]:
        s.close()
