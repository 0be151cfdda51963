"""The checkpoint store: deltas rebuild the exact conversation, idempotently, verifiably, in linear space."""

from __future__ import annotations

import json
import random
import string
import threading
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text

from orchestrator.store import CheckpointConflict, CheckpointCorrupt, CheckpointNotFound, Store
from sdk import Message, NotFound, ToolCall

pytestmark = pytest.mark.postgresql  # the store's SQL must mean the same on SQLite and PostgreSQL


def _opening() -> list[Message]:
    return [Message(role="system", content="You are terse."), Message(role="user", content="Count to three.")]


def _turn(i: int) -> list[Message]:
    return [
        Message(
            role="assistant", content=None, tool_calls=[ToolCall(id=f"c{i}", name="count", arguments=f'{{"n": {i}}}')]
        ),
        Message(role="tool", content=str(i), tool_call_id=f"c{i}", name="count"),
    ]


def _cold(db_url: str) -> Store:
    """A second process's view: same file, nothing cached."""
    return Store.open(db_url)


def test_every_checkpoint_reads_back_as_the_concatenation_of_what_was_written(store: Store, db_url: str) -> None:
    refs = [store.checkpoints.write_root("t", _opening(), {"agent": "a"})]
    expected = [_opening()]
    for step in range(1, 6):
        refs.append(store.checkpoints.append("t", refs[-1], step, _turn(step), {"seen": step}, {"step": step}))
        expected.append(expected[-1] + _turn(step))

    cold = _cold(db_url)
    for ref, messages in zip(refs, expected):
        for reader in (store, cold):
            content = reader.checkpoints.read(ref.id)
            assert content.ref == ref
            assert content.task_id == "t"
            assert content.messages == messages
    last = cold.checkpoints.read(refs[-1].id)
    assert last.scratch == {"seen": 5} and last.state == {"step": 5}
    assert store.checkpoints.read(refs[0].id).scratch == {}
    assert [r.seq for r in refs] == list(range(6))
    cold.close()


_text = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40)
_json_leaf = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | _text
_json = st.recursive(
    _json_leaf, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3), max_leaves=8
)
_message = st.builds(
    Message,
    role=st.sampled_from(["user", "assistant", "tool"]),
    content=st.none() | _text,
    tool_calls=st.none() | st.lists(st.builds(ToolCall, id=_text, name=_text, arguments=_text), max_size=2),
    tool_call_id=st.none() | _text,
)
_step = st.tuples(
    st.lists(_message, max_size=4), st.dictionaries(_text, _json, max_size=3), st.dictionaries(_text, _json, max_size=3)
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(root=st.lists(_message, min_size=1, max_size=3), steps=st.lists(_step, max_size=8))
def test_any_sequence_of_appends_reads_back_whole(store: Store, db_url: str, root: list[Message], steps: list) -> None:
    task_id = uuid.uuid4().hex  # the store outlives the examples: each one is its own task
    refs = [store.checkpoints.write_root(task_id, root, {})]
    written = [(list(root), {}, {})]
    for i, (messages, scratch, state) in enumerate(steps, start=1):
        refs.append(store.checkpoints.append(task_id, refs[-1], i, messages, scratch, state))
        written.append((written[-1][0] + messages, scratch, state))

    cold = _cold(db_url)
    for ref, (messages, scratch, state) in zip(refs, written):
        for reader in (store, cold):
            content = reader.checkpoints.read(ref.id)
            assert content.messages == messages
            assert content.scratch == scratch
            assert content.state == state
    assert [s.message_count for s in cold.checkpoints.list(task_id)] == [len(w[0]) for w in written]
    cold.close()


def test_a_retried_append_returns_the_existing_checkpoint(store: Store) -> None:
    root = store.checkpoints.write_root("t", _opening(), {})
    assert store.checkpoints.write_root("t", _opening(), {}) == root
    first = store.checkpoints.append("t", root, 1, _turn(1), {"k": 1}, {"s": 1})
    again = store.checkpoints.append("t", root, 1, _turn(1), {"k": 1}, {"s": 1})
    assert again == first
    assert [s.seq for s in store.checkpoints.list("t")] == [0, 1]


def test_a_different_delta_on_a_checkpoint_already_built_on_is_refused(store: Store, db_url: str) -> None:
    root = store.checkpoints.write_root("t", _opening(), {})
    first = store.checkpoints.append("t", root, 1, _turn(1), {}, {})
    second = store.checkpoints.append("t", first, 2, _turn(2), {}, {})
    with pytest.raises(CheckpointConflict, match="seq 1"):
        store.checkpoints.append("t", root, 1, _turn(3), {}, {})
    with pytest.raises(ValueError):  # a scratch change is a different delta too
        _cold(db_url).checkpoints.append("t", root, 1, _turn(1), {"other": True}, {})
    with pytest.raises(CheckpointConflict):  # a task's opening is never replaced
        store.checkpoints.write_root("t", [Message(role="user", content="something else")], {})
    assert store.checkpoints.latest("t") == second
    assert [s.seq for s in store.checkpoints.list("t")] == [0, 1, 2]


def test_a_workflow_task_run_again_replaces_the_checkpoint_its_failed_run_wrote(store: Store, db_url: str) -> None:
    """The failed run wrote seq 1 from a local activity (with an answer its update never got accepted for), then
    timed out; the run again, from the same parent, writes what history says. It replaces the first, and the task
    goes on from it, in this process and in a cold one."""
    root = store.checkpoints.write_root("t", _opening(), {})
    speculative = store.checkpoints.append("t", root, 1, _turn(1), {}, {"answer": "that is all"})
    durable = store.checkpoints.append("t", root, 1, _turn(1), {}, {"answer": None})
    assert durable.seq == 1 and durable.hash != speculative.hash
    assert store.checkpoints.latest("t") == durable
    assert [s.seq for s in store.checkpoints.list("t")] == [0, 1]
    assert store.checkpoints.read(durable.id).state == {"answer": None}
    nxt = store.checkpoints.append("t", durable, 2, _turn(2), {}, {})
    assert [m.content for m in _cold(db_url).checkpoints.read(nxt.id).messages][-2:] == [
        m.content for m in _turn(1) + _turn(2)
    ][-2:]
    with pytest.raises(CheckpointConflict, match="is not task"):  # the replaced one is no parent any more
        store.checkpoints.append("t", speculative, 2, _turn(2), {}, {})


def test_appending_to_a_parent_that_is_not_stored_is_refused(store: Store) -> None:
    root = store.checkpoints.write_root("t", _opening(), {})
    with pytest.raises(CheckpointNotFound, match="no checkpoint seq 4"):
        store.checkpoints.append("t", root.model_copy(update={"seq": 4}), 5, _turn(5), {}, {})
    with pytest.raises(CheckpointConflict, match="is not task"):
        store.checkpoints.append("t", root.model_copy(update={"hash": "0" * 16}), 1, _turn(1), {}, {})
    with pytest.raises(CheckpointNotFound):
        store.checkpoints.append("other-task", root, 1, _turn(1), {}, {})


def test_racing_writers_of_one_seq_leave_exactly_one_checkpoint(db_url: str) -> None:
    stores = [Store.open(db_url) for _ in range(4)]
    root = stores[0].checkpoints.write_root("t", _opening(), {})
    outcomes: list[object] = []
    barrier = threading.Barrier(len(stores))

    def write(i: int) -> None:
        barrier.wait()
        try:
            outcomes.append(stores[i].checkpoints.append("t", root, 1, _turn(i), {}, {}))
        except CheckpointConflict as exc:
            outcomes.append(exc)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(len(stores))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(outcomes) == len(stores)
    assert [s.seq for s in stores[0].checkpoints.list("t")] == [0, 1]
    # The one left standing is one writer's whole write, as that writer was told, and it reads back intact.
    standing = stores[0].checkpoints.latest("t")
    assert standing in [o for o in outcomes if not isinstance(o, Exception)]
    assert stores[1].checkpoints.read(standing.id).ref == standing
    for s in stores:
        s.close()


def test_an_edited_row_breaks_the_hash_chain(store: Store, db_url: str) -> None:
    root = store.checkpoints.write_root("t", _opening(), {})
    one = store.checkpoints.append("t", root, 1, _turn(1), {}, {})
    two = store.checkpoints.append("t", one, 2, _turn(2), {}, {})
    forged = json.dumps(
        {"messages": [{"role": "assistant", "content": "forged"}], "scratch": {}, "state": {}, "step": 1}
    )
    with store.engine.begin() as conn:
        conn.execute(
            text("UPDATE checkpoints SET delta = :d, encoding = 'json' WHERE task_id = 't' AND seq = 1"),
            {"d": forged.encode()},
        )
    cold = _cold(db_url)
    with pytest.raises(CheckpointCorrupt, match="seq 1"):
        cold.checkpoints.read(two.id)
    with pytest.raises(CheckpointCorrupt):
        cold.checkpoints.read(one.id)
    with pytest.raises(CheckpointCorrupt):  # this process had it cached, but the row itself is checked
        store.checkpoints.read(one.id)
    assert cold.checkpoints.read(root.id).messages == _opening()
    cold.close()


def test_a_missing_row_breaks_the_chain(store: Store, db_url: str) -> None:
    ref = store.checkpoints.write_root("t", _opening(), {})
    for step in range(1, 4):
        ref = store.checkpoints.append("t", ref, step, _turn(step), {}, {})
    with store.engine.begin() as conn:
        conn.execute(text("DELETE FROM checkpoints WHERE task_id = 't' AND seq = 2"))
    with pytest.raises(CheckpointCorrupt, match="no checkpoint seq 2"):
        _cold(db_url).checkpoints.read(ref.id)


def test_reads_return_copies_that_callers_may_change(store: Store) -> None:
    root = store.checkpoints.write_root("t", _opening(), {"nested": {"a": [1]}})
    first = store.checkpoints.read(root.id)
    first.messages.append(Message(role="user", content="mine"))
    first.messages[0].content = "changed"
    first.state["nested"]["a"].append(2)
    second = store.checkpoints.read(root.id)
    assert second.messages == _opening()
    assert second.state == {"nested": {"a": [1]}}


def test_fork_materializes_the_source_conversation_as_the_new_root(store: Store, db_url: str) -> None:
    ref = store.checkpoints.write_root("src", _opening(), {})
    refs = [ref]
    for step in range(1, 5):
        refs.append(store.checkpoints.append("src", refs[-1], step, _turn(step), {"at": step}, {}))

    cold = _cold(db_url)
    fork_root = cold.checkpoints.fork("src", 2, "fork", {"forked": True})
    assert (fork_root.seq, fork_root.step) == (0, 2)
    assert cold.checkpoints.fork("src", 2, "fork", {"forked": True}) == fork_root  # a retried fork
    content = cold.checkpoints.read(fork_root.id)
    assert content.messages == _opening() + _turn(1) + _turn(2)
    assert content.scratch == {"at": 2} and content.state == {"forked": True}

    child = cold.checkpoints.append("fork", fork_root, 3, [Message(role="user", content="try another way")], {}, {})
    assert store.checkpoints.read(child.id).messages == _opening() + _turn(1) + _turn(2) + [
        Message(role="user", content="try another way")
    ]
    assert store.checkpoints.read(refs[-1].id).messages == _opening() + [m for i in range(1, 5) for m in _turn(i)]
    with pytest.raises(CheckpointNotFound, match="no checkpoint seq 9") as missing:
        store.checkpoints.fork("src", 9, "fork-2", {})
    assert isinstance(missing.value, KeyError) and isinstance(missing.value, NotFound)
    with pytest.raises(CheckpointNotFound):
        store.checkpoints.fork("no-such-task", 0, "fork-3", {})
    cold.close()


def test_find_latest_list_and_unknown_ids(store: Store) -> None:
    assert store.checkpoints.latest("t") is None
    assert store.checkpoints.find("t", 0) is None
    assert store.checkpoints.list("t") == []
    assert store.checkpoints.stored_bytes("t") == 0
    root = store.checkpoints.write_root("t", _opening(), {})
    one = store.checkpoints.append("t", root, 3, _turn(1), {}, {})
    assert store.checkpoints.find("t", 1) == one
    assert store.checkpoints.latest("t") == one
    summaries = store.checkpoints.list("t")
    assert [(s.seq, s.step, s.id, s.hash, s.message_count) for s in summaries] == [
        (0, 0, root.id, root.hash, 2),
        (1, 3, one.id, one.hash, 4),
    ]
    assert all(s.created_at.tzinfo is not None for s in summaries)
    assert store.checkpoints.stored_bytes("t") == sum(s.delta_bytes for s in summaries)
    with pytest.raises(CheckpointNotFound, match="no checkpoint with id 999"):
        store.checkpoints.read(999)


def test_storage_grows_linearly_with_the_conversation(store: Store, db_url: str) -> None:
    rng = random.Random(7)
    alphabet = string.ascii_letters + string.digits + " "
    ref = store.checkpoints.write_root("long", _opening(), {"agent": "a"})
    conversation = _opening()
    for step in range(1, 301):
        message = Message(role="assistant", content="".join(rng.choices(alphabet, k=1024)))
        state = {"spend": {"tokens_used": step * 300, "token_limit": 1_000_000, "usd_used": step * 0.001}, "step": step}
        ref = store.checkpoints.append("long", ref, step, [message], {"notes": step}, state)
        conversation.append(message)

    final_size = len(json.dumps([m.model_dump(mode="json") for m in conversation]))
    assert store.checkpoints.stored_bytes("long") <= 2 * final_size
    # Linear, not quadratic: the last step's delta is no bigger than the first's, give or take the text.
    deltas = [s.delta_bytes for s in store.checkpoints.list("long")[1:]]
    assert max(deltas) <= 2 * min(deltas)
    assert _cold(db_url).checkpoints.read(ref.id).messages == conversation
