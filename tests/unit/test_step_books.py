"""The LLM step's bookkeeping over the store (StoreStepBooks), on a real SQLite store.

What the control queue's step does directly, and what the node routes do for a GPU node's step:
write the pending step and read the conversation in one call, book a call once, find what earlier
attempts booked, book what dead attempts lost.
"""

from __future__ import annotations

import pytest

from activities.step.store_books import CheckpointOfAnotherTask, StoreStepBooks
from orchestrator.store import Store
from orchestrator.store.checkpoints import CheckpointConflict
from sdk import Message, Spend, TaskState, TaskStatus, ToolCall
from sdk.wire.contracts import PendingStep
from sdk.wire.ledger import DeadTokens, LedgerEntry
from sdk.wire.step_call import CallReport, StepRef

STEP = StepRef("t1", 1, "llama-3.2-1b", "default")


def books_of(store: Store) -> StoreStepBooks:
    return StoreStepBooks(store.checkpoints, store.tasks, store.events, store.ledger)


def pending_step(task_id: str, step: int = 1) -> PendingStep:
    state = TaskState(
        task_id=task_id,
        agent="writer",
        agent_version="1",
        model="llama-3.2-1b",
        tenant="default",
        status=TaskStatus.running,
        step=step,
        max_steps=5,
        spend=Spend(token_limit=5000, tokens_used=120),
    )
    return PendingStep(
        step=step,
        state=state,
        new_messages=[
            Message(role="assistant", tool_calls=[ToolCall(id="c1", name="lookup", arguments="{}")]),
            Message(role="tool", tool_call_id="c1", name="lookup", content="a ship's place at a wharf"),
        ],
    )


def entry(task_id: str = "t1", step: int = 1, attempt: int = 1, kind: str = "settled", **fields: object) -> LedgerEntry:
    values: dict = dict(
        task_id=task_id,
        step=step,
        attempt=attempt,
        model="llama-3.2-1b",
        prompt_tokens=30,
        completion_tokens=12,
        cost_usd=0.001,
        ttft_s=0.05,
        duration_s=0.2,
        served_by="engine",
        kind=kind,
        response_id=f"r{attempt}",
    )
    values.update(fields)
    return LedgerEntry(**values)


def test_prepare_without_a_pending_step_reads_the_conversation_only(store: Store) -> None:
    root = store.checkpoints.write_root("t1", [Message(role="user", content="Explain KV caches")], {})
    prepared = books_of(store).prepare(STEP, root, None)
    assert prepared.checkpoint == root
    assert [m.content for m in prepared.messages] == ["Explain KV caches"]
    assert store.events.read("t1") == [] and store.tasks.get("t1") is None


def test_prepare_writes_the_pending_step_first_then_reads_past_it(store: Store) -> None:
    root = store.checkpoints.write_root("t1", [Message(role="user", content="What is a berth?")], {})
    prepared = books_of(store).prepare(STEP, root, pending_step("t1"))
    assert (prepared.checkpoint.seq, prepared.checkpoint.step) == (1, 1)
    assert store.checkpoints.latest("t1") == prepared.checkpoint
    assert [m.role for m in prepared.messages] == ["user", "assistant", "tool"]
    record = store.tasks.get("t1")
    assert record is not None and record.state.checkpoint_seq == 1
    [event] = store.events.read("t1")
    assert event.kind == "step" and event.data["checkpoint_seq"] == 1 and event.data["tool_calls"] == ["lookup"]
    assert event.data["tokens_used"] == 120


def test_a_retried_prepare_writes_the_step_once(store: Store) -> None:
    root = store.checkpoints.write_root("t1", [Message(role="user", content="What is a berth?")], {})
    books = books_of(store)
    first = books.prepare(STEP, root, pending_step("t1"))
    again = books.prepare(STEP, root, pending_step("t1"))
    assert again.checkpoint == first.checkpoint and len(again.messages) == 3


def test_a_step_written_again_by_a_workflow_task_run_again_is_the_one_that_stands(store: Store) -> None:
    """A failed workflow task wrote step 1 with an answer its update never got accepted for; its run again writes
    it with what history holds. The task's row follows the second; the step is announced once."""
    root = store.checkpoints.write_root("t1", [Message(role="user", content="What is a berth?")], {})
    books = books_of(store)
    speculative = pending_step("t1")
    speculative.new_messages[1].content = "that is all"
    books.prepare(STEP, root, speculative)
    durable = pending_step("t1")
    durable.state.spend.tokens_used = 130
    prepared = books.prepare(STEP, root, durable)
    assert prepared.messages[-1].content == "a ship's place at a wharf"
    record = store.tasks.get("t1")
    assert record is not None and record.state.spend.tokens_used == 130
    assert [e.kind for e in store.events.read("t1")] == ["step"]


def test_prepare_from_a_parent_of_another_task_is_refused(store: Store) -> None:
    other = store.checkpoints.write_root("t2", [Message(role="user", content="hi")], {})
    store.checkpoints.write_root("t1", [Message(role="user", content="hi")], {})
    with pytest.raises(CheckpointConflict):
        books_of(store).prepare(STEP, other, pending_step("t1"))


def test_reading_another_tasks_checkpoint_is_refused(store: Store) -> None:
    """Before, any checkpoint id was read for any task, and its hash never checked."""
    secret = store.checkpoints.write_root("t2", [Message(role="user", content="tenant B's plans")], {})
    own = store.checkpoints.write_root("t1", [Message(role="user", content="hi")], {})
    with pytest.raises(CheckpointOfAnotherTask):
        books_of(store).prepare(STEP, secret, None)
    with pytest.raises(CheckpointOfAnotherTask):
        books_of(store).prepare(STEP, own.model_copy(update={"hash": "0" * 16}), None)


def call(attempt: int = 1, **fields: object) -> CallReport:
    values: dict = dict(
        attempt=attempt,
        prompt_tokens=30,
        completion_tokens=12,
        cost_usd=0.001,
        ttft_s=0.05,
        duration_s=0.2,
        served_by="engine",
        response_id=f"r{attempt}",
        finish_reason="stop",
    )
    values.update(fields)
    return CallReport(**values)


def test_settle_books_once_and_announces_once_in_the_typed_shape(store: Store) -> None:
    books = books_of(store)
    assert books.settle(STEP, call()).recorded is True
    assert books.settle(STEP, call()).recorded is False
    assert [e.kind for e in store.events.read("t1")] == ["llm_call"]
    data = store.events.read("t1")[0].data
    assert (data["step"], data["model"], data["tenant"], data["prompt_tokens"], data["tokens_per_s"]) == (
        1,
        "llama-3.2-1b",
        "default",
        30,
        60.0,
    )
    assert data["node_id"] is None and data["queue_wait_s"] is None  # off the fleet: every key, None
    assert store.ledger.totals("t1").calls == 1


def test_booked_lists_the_settled_entries_of_earlier_attempts_of_that_step(store: Store) -> None:
    books = books_of(store)
    for e in (
        entry(attempt=1),
        entry(attempt=2),
        entry(attempt=3),
        entry(step=2, attempt=1),
        entry(attempt=1, kind="lost", response_id="", served_by=""),
        entry(task_id="t2"),
    ):
        store.ledger.record(e)
    assert [(e.step, e.attempt, e.response_id) for e in books.booked(STEP, before_attempt=3)] == [
        (1, 1, "r1"),
        (1, 2, "r2"),
    ]
    assert books.booked(STEP, before_attempt=1) == []


def test_book_interrupted_records_each_entry_once(store: Store) -> None:
    books = books_of(store)
    lost = [DeadTokens(1, "lost", 40, 0.004), DeadTokens(2, "lost", 15, 0.0015)]
    books.book_interrupted(STEP, lost)
    books.book_interrupted(STEP, lost)
    assert store.ledger.totals("t1").lost_tokens == 55
    assert store.ledger.totals("t1").cost_usd == pytest.approx(0.0055)
    assert store.events.read("t1") == []
