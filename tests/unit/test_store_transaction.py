"""Store.transaction: the store's calls in one transaction, as a node's step routes make them."""

from __future__ import annotations

import pytest

from orchestrator.store import Store
from orchestrator.store.checkpoints import CheckpointNotFound
from sdk import Message
from sdk.wire.ledger import LedgerEntry

pytestmark = pytest.mark.postgresql  # the store's SQL must mean the same on SQLite and PostgreSQL


def _entry(attempt: int = 1) -> LedgerEntry:
    return LedgerEntry(
        task_id="t",
        step=1,
        attempt=attempt,
        model="m",
        prompt_tokens=30,
        completion_tokens=12,
        cost_usd=0.01,
        ttft_s=0.1,
        duration_s=0.5,
        served_by="node-1/r-1",
    )


class Refused(Exception):
    pass


def test_writes_in_a_transaction_land_together_when_it_ends(store: Store, db_url: str) -> None:
    other = Store.open(db_url)  # another process's view of the same database
    try:
        with store.transaction() as tx:
            assert tx.ledger.record(_entry()) is True
            seq = tx.events.append("t", "llm_call", {"attempt": 1})
            assert other.ledger.entries("t") == [] and other.events.read("t") == []  # nothing shown before the end
        assert other.ledger.entries("t") == [_entry()]
        assert [e.seq for e in other.events.read("t")] == [seq]
    finally:
        other.close()


def test_a_transaction_that_raises_writes_nothing(store: Store) -> None:
    with pytest.raises(Refused):
        with store.transaction() as tx:
            tx.ledger.record(_entry())
            tx.events.append("t", "llm_call", {"attempt": 1})
            raise Refused
    assert store.ledger.entries("t") == [] and store.events.read("t") == []


def test_a_retried_booking_in_a_transaction_is_skipped_without_ending_it(store: Store) -> None:
    """The ledger skips a taken key rather than failing on it, so the transaction's later writes still land."""
    store.ledger.record(_entry())
    with store.transaction() as tx:
        assert tx.ledger.record(_entry()) is False
        assert tx.ledger.record(_entry(attempt=2)) is True
        tx.events.append("t", "llm_call", {"attempt": 2})
    assert [e.attempt for e in store.ledger.entries("t")] == [1, 2] and len(store.events.read("t")) == 1


def test_read_latest_is_the_newest_checkpoint_and_its_whole_conversation(store: Store) -> None:
    assert store.checkpoints.read_latest("t") is None
    root = store.checkpoints.write_root("t", [Message(role="user", content="What is a berth?")], {})
    with store.transaction() as tx:
        latest = tx.checkpoints.read_latest("t")
    assert latest is not None and latest.ref == root
    child = store.checkpoints.append("t", root, 1, [Message(role="assistant", content="A ship's place.")], {}, {})
    latest = store.checkpoints.read_latest("t")
    assert latest is not None and latest.ref == child
    assert [m.content for m in latest.messages] == ["What is a berth?", "A ship's place."]


def _pending(step: int, text: str):
    from sdk import Spend, TaskState, TaskStatus
    from sdk.wire.contracts import PendingStep

    state = TaskState(
        task_id="t",
        status=TaskStatus.running,
        agent="a",
        agent_version="1",
        model="m",
        tenant="default",
        step=step,
        max_steps=10,
        spend=Spend(tokens_used=10 * step, token_limit=1000),
    )
    return PendingStep(step=step, new_messages=[Message(role="assistant", content=text)], state=state)


def test_a_step_is_recorded_in_one_transaction_checkpoint_state_and_event_or_none(store: Store) -> None:
    """A step's checkpoint, the task's state and the step event commit together; a failure after the checkpoint
    leaves no checkpoint, and the store never serves the one that was rolled back (from its cache either)."""
    from activities.step.store_books import record_step

    root = store.checkpoints.write_root("t", [Message(role="user", content="Count to two.")], {})
    with pytest.raises(Refused):
        with store.transaction() as tx:
            written = record_step(tx, "t", root, _pending(1, "one"))
            raise Refused
    assert store.checkpoints.find("t", 1) is None and store.events.read("t") == []
    with pytest.raises(CheckpointNotFound):
        store.checkpoints.read(written.id)  # neither in the database nor in the cache
    with store.transaction() as tx:
        first = record_step(tx, "t", root, _pending(1, "one"))
    with store.transaction() as tx:  # a retry of the same step: recorded and announced once
        assert record_step(tx, "t", root, _pending(1, "one")) == first
    assert [m.content for m in store.checkpoints.read(first.id).messages] == ["Count to two.", "one"]
    assert [(e.kind, e.data["step"]) for e in store.events.read("t")] == [("step", 1)]
    record = store.tasks.get("t")
    assert record is not None and record.state.checkpoint_seq == 1
