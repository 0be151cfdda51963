"""A GPU node's step bookkeeping (RemoteStepBooks) through the real app and store.

The node side is synchronous (the activity calls it through `asyncio.to_thread`), so the app
runs behind a small sync-to-ASGI transport; these routes never touch Temporal, so the gateway
points at a closed port, as in test_api_nodes.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from activities.ports import LedgerEntry
from orchestrator.api import TemporalGateway
from orchestrator.config import BerthConfig
from orchestrator.node.step_books import RemoteStepBooks, StepBooksRefused
from orchestrator.store import LeaseRecord, Store
from sdk import CheckpointRef, Message, Spend, TaskState, TaskStatus, ToolCall
from sdk.contracts import PendingStep

JOIN_TOKEN = "join-me-books"


class SyncAsgi(httpx.BaseTransport):
    """The app in-process for a synchronous client: each request runs the ASGI app in a fresh loop."""

    def __init__(self, app) -> None:
        self._asgi = httpx.ASGITransport(app)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        async def run() -> httpx.Response:
            replay = httpx.Request(request.method, request.url, headers=request.headers, content=request.read())
            response = await self._asgi.handle_async_request(replay)
            return httpx.Response(response.status_code, headers=response.headers, content=await response.aread())

        return asyncio.run(run())


@pytest.fixture
def config(tmp_path: Path) -> BerthConfig:
    return BerthConfig(data_dir=tmp_path, database_url=f"sqlite:///{tmp_path}/berth.db", join_token=JOIN_TOKEN)


@pytest.fixture
def gateway(closed_port: int) -> TemporalGateway:
    return TemporalGateway(f"127.0.0.1:{closed_port}")


@pytest.fixture
def node_secret(app) -> str:
    with httpx.Client(transport=SyncAsgi(app), base_url="http://berth") as http:
        joined = http.post("/v1/nodes/register", json={
            "node_id": "gpu-books", "join_token": JOIN_TOKEN, "datacenter": "dc1", "zone": "z1",
            "gpus": [{"index": 0, "uuid": "GPU-0", "type_name": "H100-80GB", "memory_total_mib": 81559}],
        })
    assert joined.status_code == 201, joined.text
    return joined.json()["node_secret"]


@pytest.fixture
def leased(store: Store) -> None:
    """The pool leased steps of t1 to the node (what lets it read and book them)."""
    store.leases.add(LeaseRecord(lease_id="lease-1", task_id="t1", step=1, model="llama-3.2-1b", node_id="gpu-books",
                                 replica_id="r-1", tokens=500, tenant="default"))


@pytest.fixture
def books(app, node_secret: str, leased: None) -> Iterator[RemoteStepBooks]:
    with RemoteStepBooks("http://berth", "gpu-books", lambda: node_secret, transport=SyncAsgi(app)) as b:
        yield b


def pending_step(task_id: str) -> PendingStep:
    state = TaskState(task_id=task_id, agent="writer", agent_version="1", model="llama-3.2-1b", tenant="default",
                      status=TaskStatus.running, step=1, max_steps=5, spend=Spend(token_limit=5000, tokens_used=80))
    return PendingStep(step=1, state=state, new_messages=[
        Message(role="assistant", tool_calls=[ToolCall(id="c1", name="lookup", arguments='{"word": "berth"}')]),
        Message(role="tool", tool_call_id="c1", name="lookup", content="a ship's place at a wharf"),
    ])


def entry(attempt: int = 1, kind: str = "settled", **fields: object) -> LedgerEntry:
    values: dict = dict(task_id="t1", step=1, attempt=attempt, model="llama-3.2-1b", prompt_tokens=30,
                        completion_tokens=12, cost_usd=0.0015, ttft_s=0.05, duration_s=0.25,
                        served_by="gpu-books/r-1", kind=kind, response_id=f"chatcmpl-{attempt}")
    values.update(fields)
    return LedgerEntry(**values)


def root(store: Store) -> CheckpointRef:
    return store.checkpoints.write_root("t1", [Message(role="user", content="What is a berth?")], {})


def test_prepare_reads_the_conversation_and_writes_a_pending_step_first(books: RemoteStepBooks, store: Store) -> None:
    start = root(store)
    plain = books.prepare("t1", start, None)
    assert plain.checkpoint == start and [m.content for m in plain.messages] == ["What is a berth?"]
    assert store.events.read("t1") == []

    prepared = books.prepare("t1", start, pending_step("t1"))
    assert prepared.checkpoint.seq == 1 and store.checkpoints.latest("t1") == prepared.checkpoint
    assert [m.role for m in prepared.messages] == ["user", "assistant", "tool"]
    assert prepared.messages[1].tool_calls == [ToolCall(id="c1", name="lookup", arguments='{"word": "berth"}')]
    record = store.tasks.get("t1")
    assert record is not None and record.state.checkpoint_seq == 1
    assert [e.kind for e in store.events.read("t1")] == ["step"]


def test_settle_books_once_and_announces_once(books: RemoteStepBooks, store: Store) -> None:
    event = {"step": 1, "attempt": 1, "node_id": "gpu-books", "gpu_indexes": [0], "tier": "warm"}
    assert books.settle(entry(), event) is True
    assert books.settle(entry(), event) is False
    [announced] = store.events.read("t1")
    assert announced.kind == "llm_call" and announced.data == event
    assert store.ledger.entries("t1") == [entry()]


def test_a_settled_call_is_labelled_with_the_tenant_that_owns_the_task_not_the_nodes_word(
        books: RemoteStepBooks, store: Store) -> None:
    books.prepare("t1", root(store), pending_step("t1"))  # t1 is stored, owned by "default"
    assert books.settle(entry(), {"step": 1, "tenant": "someone-else"}) is True
    [call] = [e for e in store.events.read("t1") if e.kind == "llm_call"]
    assert call.data == {"step": 1, "tenant": "default"}


def test_booked_and_book_interrupted_serve_a_retried_attempt(books: RemoteStepBooks, store: Store) -> None:
    books.settle(entry(attempt=1), {"step": 1})
    books.settle(entry(attempt=2), {"step": 1})
    assert books.booked("t1", 1, before_attempt=2) == [entry(attempt=1)]
    assert books.booked("t1", 1, before_attempt=3) == [entry(attempt=1), entry(attempt=2)]
    assert books.booked("t1", 2, before_attempt=3) == []

    lost = entry(attempt=3, kind="lost", prompt_tokens=0, completion_tokens=40, cost_usd=0.0, ttft_s=0.0,
                 duration_s=0.0, served_by="", response_id="")
    books.book_interrupted([lost])
    books.book_interrupted([lost])
    books.book_interrupted([])
    assert store.ledger.totals("t1").lost_tokens == 40
    assert books.booked("t1", 1, before_attempt=4) == [entry(attempt=1), entry(attempt=2)]


def test_a_wrong_secret_is_refused_and_writes_nothing(app, node_secret: str, store: Store) -> None:
    start = root(store)
    with RemoteStepBooks("http://berth", "gpu-books", lambda: "guess", transport=SyncAsgi(app)) as impostor:
        with pytest.raises(StepBooksRefused, match="secret of 'gpu-books' is missing or wrong") as refused:
            impostor.prepare("t1", start, pending_step("t1"))
        assert refused.value.status == 401 and not refused.value.permanent
        with pytest.raises(StepBooksRefused) as refused:
            impostor.settle(entry(), {"step": 1})
        assert refused.value.status == 401
    with RemoteStepBooks("http://berth", "gpu-books", lambda: None, transport=SyncAsgi(app)) as anonymous:
        with pytest.raises(StepBooksRefused, match="401"):
            anonymous.book_interrupted([entry(kind="lost")])
    assert store.checkpoints.latest("t1") == start
    assert store.events.read("t1") == [] and store.ledger.entries("t1") == [] and store.tasks.get("t1") is None


def test_an_unknown_node_is_refused_and_writes_nothing(app, node_secret: str, store: Store) -> None:
    with RemoteStepBooks("http://berth", "ghost", lambda: node_secret, transport=SyncAsgi(app)) as ghost:
        with pytest.raises(StepBooksRefused, match="node 'ghost' is not registered") as refused:
            ghost.settle(entry(), {"step": 1})
        assert refused.value.status == 404 and not refused.value.permanent
    assert store.events.read("t1") == [] and store.ledger.entries("t1") == []


def test_numbers_beyond_the_stores_integers_are_422_naming_the_field_and_write_nothing(
    app, node_secret: str, leased: None, store: Store
) -> None:
    """Steps, attempts, token counts and checkpoint keys land in 64-bit columns; a bigger one used to reach
    the SQLite driver and come back a 500."""
    start = root(store)
    big = 2**63
    too_many_tokens = {**dataclasses.asdict(entry()), "prompt_tokens": big}
    pending = pending_step("t1").model_dump(mode="json")
    with httpx.Client(transport=SyncAsgi(app), base_url="http://berth",
                      headers={"X-Berth-Node-Secret": node_secret}) as http:
        for route, body, field in (
            ("settle", {"entry": too_many_tokens, "event": {}}, "entry.prompt_tokens"),
            ("interrupted", {"entries": [too_many_tokens]}, "entries.0.prompt_tokens"),
            ("booked", {"task_id": "t1", "step": big, "before_attempt": 2}, "step"),
            ("prepare", {"task_id": "t1", "checkpoint": {**start.model_dump(), "id": big}}, "checkpoint.id"),
            ("prepare", {"task_id": "t1", "checkpoint": start.model_dump(), "pending": {**pending, "step": big}},
             "pending.step"),
        ):
            refused = http.post(f"/v1/nodes/gpu-books/steps/{route}", json=body)
            assert refused.status_code == 422 and refused.json()["error"]["field"] == field, refused.text
    assert store.ledger.entries("t1") == [] and store.events.read("t1") == []
    assert store.checkpoints.latest("t1") == start


def test_non_finite_numbers_are_422_naming_the_field_and_write_nothing(
    app, node_secret: str, leased: None, store: Store
) -> None:
    """Python's JSON parser reads NaN and Infinity: a NaN cost hit the ledger's NOT NULL column, a NaN spend
    the checkpoint's JSON encoder, each a 500."""
    start = root(store)
    nan_cost = json.dumps({"entry": {**dataclasses.asdict(entry()), "cost_usd": float("nan")}, "event": {}})
    pending = pending_step("t1").model_dump(mode="json")
    pending["state"]["spend"]["usd_used"] = float("inf")
    inf_spend = json.dumps({"task_id": "t1", "checkpoint": start.model_dump(), "pending": pending})
    with httpx.Client(transport=SyncAsgi(app), base_url="http://berth",
                      headers={"X-Berth-Node-Secret": node_secret, "content-type": "application/json"}) as http:
        for route, body, field in (("settle", nan_cost, "entry.cost_usd"),
                                   ("prepare", inf_spend, "pending.state.spend.usd_used")):
            refused = http.post(f"/v1/nodes/gpu-books/steps/{route}", content=body)
            assert refused.status_code == 422 and refused.json()["error"]["field"] == field, refused.text
    assert store.ledger.entries("t1") == [] and store.events.read("t1") == []
    assert store.checkpoints.latest("t1") == start


def test_a_stale_parent_is_a_permanent_refusal(books: RemoteStepBooks, store: Store) -> None:
    other = store.checkpoints.write_root("t2", [Message(role="user", content="hi")], {})
    root(store)
    with pytest.raises(StepBooksRefused) as refused:
        books.prepare("t1", other, pending_step("t1"))
    assert refused.value.status == 409 and refused.value.permanent
    assert "checkpoint" in str(refused.value)


def test_a_node_without_a_lease_for_the_task_is_refused_and_writes_nothing(books: RemoteStepBooks,
                                                                           store: Store) -> None:
    other = store.checkpoints.write_root("t9", [Message(role="user", content="not yours")], {})
    with pytest.raises(StepBooksRefused, match="holds no lease for task 't9'") as refused:
        books.prepare("t9", other, None)
    assert refused.value.status == 403 and refused.value.permanent
    with pytest.raises(StepBooksRefused, match="403"):
        books.settle(entry(task_id="t9"), {"step": 1})
    with pytest.raises(StepBooksRefused, match="403"):
        books.book_interrupted([entry(kind="lost"), entry(task_id="t9", kind="lost")])
    assert store.ledger.entries("t9") == [] and store.ledger.entries("t1") == [] and store.events.read("t9") == []


def test_a_node_may_not_write_another_tasks_state_nor_move_its_task_to_another_tenant(books: RemoteStepBooks,
                                                                                     store: Store) -> None:
    """A lease on t1 lets a node write t1's step: not t9's state, nor t1 under another tenant."""
    start = root(store)
    store.tasks.create("t9", "{}", pending_step("t9").state)
    store.tasks.create("t1", "{}", pending_step("t1").state)
    other_task = pending_step("t1").model_copy(update={"state": pending_step("t9").state})
    with pytest.raises(StepBooksRefused, match="state is of task 't9', not of 't1'") as refused:
        books.prepare("t1", start, other_task)
    assert refused.value.status == 422
    moved = pending_step("t1")
    moved = moved.model_copy(update={"state": moved.state.model_copy(update={"tenant": "acme"})})
    with pytest.raises(StepBooksRefused, match="another tenant") as refused:
        books.prepare("t1", start, moved)
    assert refused.value.status == 403
    assert store.checkpoints.latest("t1") == start and store.events.read("t1") == []
    assert store.tasks.get("t1").state.tenant == "default"  # type: ignore[union-attr]
    assert store.tasks.get("t9").state.spend.tokens_used == 80  # type: ignore[union-attr]
