"""Tokens as they are written, on a real fleet: `berth up` with two `berth node` agents, the SDK following a
task's stream over real HTTP. The deltas a client gets for each step add up to exactly the step's stored text,
whether the answer ran through, its node was preempted mid-answer (the step continues the handed-over text on
the other node), or the task was cancelled mid-answer (the client holds what the node had written, as the node
itself still serves it). Order and content only, never timings.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest

from orchestrator.api.writing_sources import SourcePiece, from_node
from orchestrator.store import Store
from sdk import Budget, StepFinished, SyncClient, SyncTaskHandle, TaskStatus, TextReset, TokenDelta
from tests.system.conftest import Stack, fleet_stack, wait_until

pytestmark = pytest.mark.system

FLEET = [
    {"node_id": "delta-a", "datacenter": "east", "zone": "east-1a", "capacity": "on-demand", "gpus": "1xH100-80GB"},
    {"node_id": "delta-b", "datacenter": "east", "zone": "east-1b", "capacity": "spot", "gpus": "1xH100-80GB"},
]
# About 6 s of writing at llama-3.1-8b's simulated pace on this stack: long enough to cut into.
REPORT = "berths\nlength: 1500 tokens"
BUDGET = 80_000


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with fleet_stack(tmp_path_factory.mktemp("deltas"), FLEET, latency_scale=0.5, load_time_scale=0.05) as stack:
        yield stack


@dataclass
class Received:
    """A client's text of each step, deltas and resets applied at their offsets as sdk/_stream.py says."""

    texts: dict[int, str] = field(default_factory=dict)
    at_step_finished: dict[int, str] = field(default_factory=dict)

    def apply(self, event: object) -> None:
        if isinstance(event, TokenDelta):
            held = self.texts.get(event.step, "")
            assert event.offset <= len(held), "a delta never leaves a gap"
            self.texts[event.step] = held[: event.offset] + event.text
        elif isinstance(event, TextReset):
            self.texts[event.step] = self.texts.get(event.step, "")[: event.offset]
        elif isinstance(event, StepFinished):
            self.at_step_finished[event.step] = self.texts.get(event.step, "")


def follow(handle: SyncTaskHandle, when_writing: Callable[[int], None] | None = None) -> Received:
    """Follow the task to its end; `when_writing(step)` runs once, at the answer's first delta of text."""
    received = Received()
    for event in handle.stream():
        received.apply(event)
        if when_writing is not None and isinstance(event, TokenDelta) and event.text:
            when_writing(event.step)
            when_writing = None
    return received


def stored_step_texts(stack: Stack, task_id: str) -> dict[int, str]:
    """Each stored step's text: the content of the assistant message its checkpoint added (steps that only
    called tools wrote none)."""
    store = Store.open(f"sqlite:///{stack.data_dir / 'berth.db'}")
    try:
        summaries = store.checkpoints.list(task_id)
        texts = {}
        for before, summary in zip(summaries, summaries[1:], strict=False):
            added = store.checkpoints.read(summary.id).messages[before.message_count :]
            texts[summary.step] = next((m.content or "" for m in added if m.role == "assistant"), "")
        return texts
    finally:
        store.close()


def written_text(received: Received) -> dict[int, str]:
    return {step: text for step, text in received.texts.items() if text}


def generating_on(stack: Stack, task_id: str) -> str | None:
    with sqlite3.connect(f"file:{stack.data_dir / 'berth.db'}?mode=ro", uri=True) as db:
        row = db.execute("SELECT node_id FROM leases WHERE task_id = ?", (task_id,)).fetchone()
    return row[0] if row else None


def test_an_answer_written_on_a_node_arrives_whole_as_deltas(fleet: Stack) -> None:
    with SyncClient(fleet.api, fleet.admin_key()) as client:
        handle = client.submit("writer", REPORT, budget=Budget(BUDGET), model="llama-3.1-8b")
        received = follow(handle)
        state = handle.status()
    assert state.status == TaskStatus.completed
    stored = stored_step_texts(fleet, handle.task_id)
    assert received.at_step_finished == stored
    assert written_text(received) == {s: t for s, t in stored.items() if t}
    assert received.texts[state.step] == state.result


def test_a_node_preempted_mid_answer_hands_over_and_the_deltas_still_add_up(fleet: Stack) -> None:
    preempted: list[str] = []
    with SyncClient(fleet.api, fleet.admin_key()) as client:
        handle = client.submit("writer", REPORT, budget=Budget(BUDGET), model="llama-3.1-8b")

        def preempt(step: int) -> None:
            node = wait_until(lambda: generating_on(fleet, handle.task_id), 30, "the answer's lease")
            client.preempt_node(node, notice_s=10)
            preempted.append(node)

        received = follow(handle, preempt)
        state = handle.status()
        interruptions = [e.data for e in handle.interruptions()]
    assert state.status == TaskStatus.completed
    assert [(i["node_id"], i["kind"]) for i in interruptions] == [(preempted[0], "notice")]
    assert interruptions[0]["resumed_on"] != preempted[0]
    stored = stored_step_texts(fleet, handle.task_id)
    assert received.at_step_finished == stored
    assert written_text(received) == {s: t for s, t in stored.items() if t}
    assert received.texts[state.step] == state.result
    wait_until(lambda: client_node_healthy(fleet, preempted[0]), 90, "the preempted node to come back")


def test_a_cancelled_answer_leaves_the_client_with_what_its_node_wrote(fleet: Stack) -> None:
    cut_on: list[tuple[str, int]] = []
    with SyncClient(fleet.api, fleet.admin_key()) as client:
        handle = client.submit("writer", REPORT, budget=Budget(BUDGET), model="llama-3.1-8b")

        def cancel(step: int) -> None:
            node = wait_until(lambda: generating_on(fleet, handle.task_id), 30, "the answer's lease")
            cut_on.append((node, step))
            handle.cancel("enough")

        received = follow(handle, cancel)
        state = handle.status()
    assert state.status == TaskStatus.cancelled
    node, step = cut_on[0]
    on_node = asyncio.run(node_text(fleet, node, handle.task_id, step))  # the node keeps a cut text a while
    assert on_node and received.texts[step] == on_node


async def node_text(stack: Stack, node: str, task_id: str, step: int) -> str:
    """What `node` says the step wrote, read from its writing route as the API reads it."""
    store = Store.open(f"sqlite:///{stack.data_dir / 'berth.db'}")
    try:
        source = store.peers.writing_source(node)
    finally:
        store.close()
    assert source is not None
    return "".join([i.text async for i in from_node(source, task_id, step, follow=False) if isinstance(i, SourcePiece)])


def client_node_healthy(stack: Stack, node: str) -> bool:
    return stack.http.get(f"/v1/nodes/{node}").json().get("status") == "healthy"
