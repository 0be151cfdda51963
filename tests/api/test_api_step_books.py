"""A GPU node's step bookkeeping (RemoteStepBooks) through the real app and store: the honest node's path.

The node side is synchronous (the activity calls it through `asyncio.to_thread`), so the app
runs behind a small sync-to-ASGI transport; these routes never touch Temporal, so the gateway
points at a closed port, as in test_api_nodes.py. What a node that lies meets is in
tests/security/test_lying_node.py.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import uvicorn

from orchestrator.api import TemporalGateway
from orchestrator.config import BerthConfig
from orchestrator.node.step_books import RemoteStepBooks, StepBooksRefused
from orchestrator.store import LeaseRecord, SqlEventLog, Store
from sdk import CheckpointRef, Message, Spend, TaskState, TaskStatus
from sdk.wire.lease import StepLimits, StepPlacement, call_extras_digest
from sdk.wire.ledger import DeadTokens
from sdk.wire.step_call import CallReport, StepRef
from tests.conftest import free_port
from tests.security.parties import backdate_prepares, cut_seen

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
def node_secret(app, store: Store) -> str:
    """An admitted node's secret (with the cluster token it would wait for approval, and book nothing)."""
    token = store.node_admission.mint("gpu-books", 600).join_token
    with httpx.Client(transport=SyncAsgi(app), base_url="http://berth") as http:
        joined = http.post(
            "/v1/nodes/register",
            json={
                "node_id": "gpu-books",
                "join_token": token,
                "datacenter": "dc1",
                "zone": "z1",
                "gpus": [{"index": 0, "uuid": "GPU-0", "type_name": "H100-80GB", "memory_total_mib": 81559}],
            },
        )
    assert joined.status_code == 201, joined.text
    return joined.json()["node_secret"]


# llama-3.2-1b's catalogue prices: $0.05 and $0.10 per million prompt and completion tokens.
PROMPT_USD, COMPLETION_USD = 0.05e-6, 0.10e-6
STEP = StepRef("t1", 1, "llama-3.2-1b", "default", lease_id="lease-1")


@pytest.fixture
def leased(store: Store) -> None:
    """Task t1 of tenant default, its first checkpoint, and the lease the pool gave the node for its step 1."""
    state = TaskState(
        task_id="t1",
        agent="writer",
        agent_version="1",
        model="llama-3.2-1b",
        tenant="default",
        status=TaskStatus.running,
        max_steps=5,
        spend=Spend(token_limit=5000),
    )
    store.tasks.create("t1", "{}", state)
    store.leases.add(
        LeaseRecord(
            lease_id="lease-1",
            task_id="t1",
            step=1,
            model="llama-3.2-1b",
            node_id="gpu-books",
            replica_id="r-1",
            tokens=500,
            tenant="default",
            limits=StepLimits(max_tokens=500, token_allowance=2000, first_attempt=1, last_attempt=100),
        )
    )


@pytest.fixture
def books(app, node_secret: str, leased: None) -> Iterator[RemoteStepBooks]:
    with RemoteStepBooks("http://berth", "gpu-books", lambda: node_secret, transport=SyncAsgi(app)) as b:
        yield b


def root(store: Store) -> CheckpointRef:
    return store.checkpoints.write_root("t1", [Message(role="user", content="What is a berth?")], {})


def call(attempt: int = 1, **fields: object) -> CallReport:
    values: dict = dict(
        attempt=attempt,
        prompt_tokens=30,
        completion_tokens=12,
        cost_usd=0.0,
        ttft_s=0.05,
        duration_s=0.25,
        served_by="(the node's word)",
        response_id=f"chatcmpl-{attempt}",
        finish_reason="stop",
    )
    values.update(fields)
    return CallReport(**values)


def test_prepare_reads_the_current_conversation_and_grants_what_the_lease_leaves(
    books: RemoteStepBooks, store: Store
) -> None:
    start = root(store)
    prepared = books.prepare(STEP, start, None)
    assert prepared.checkpoint == start and [m.content for m in prepared.messages] == ["What is a berth?"]
    lease = store.leases.get("lease-1")
    assert lease is not None and lease.reservation is not None
    # The prompt counted here (with the template margin) plus the answer granted fit the lease's 2,000 tokens,
    # and the answer is its max_tokens.
    assert prepared.max_tokens == lease.reservation.max_tokens == 500
    assert 8 < lease.reservation.prompt_tokens < 40
    assert store.events.read("t1") == []


def test_settle_books_once_at_the_catalogues_price_and_announces_where_it_ran(
    books: RemoteStepBooks, store: Store
) -> None:
    books.prepare(STEP, root(store), None)
    placement = StepPlacement(
        lease_id="lease-1",
        node_id="gpu-books",
        replica_id="r-1",
        gpu_indexes=[0],
        gpu_type="H100-80GB",
        tier="warm",
        decided_by="queue",
        queue_wait_s=0.2,
    )
    first = books.settle(STEP, call(cost_usd=99.0, placement=placement))
    assert first.recorded is True and first.cost_usd == pytest.approx(30 * PROMPT_USD + 12 * COMPLETION_USD)
    assert books.settle(STEP, call(cost_usd=99.0, placement=placement)).recorded is False
    [entry] = store.ledger.entries("t1")
    assert (entry.prompt_tokens, entry.completion_tokens, entry.served_by) == (30, 12, "gpu-books/r-1")
    assert entry.cost_usd == pytest.approx(first.cost_usd)
    [announced] = store.events.read("t1")
    assert announced.kind == "llm_call"
    data = announced.data
    assert (data["tenant"], data["node_id"], data["replica_id"], data["tier"], data["queue_wait_s"]) == (
        "default",
        "gpu-books",
        "r-1",
        "warm",
        0.2,
    )
    assert data["cost_usd"] == pytest.approx(first.cost_usd) and data["finish_reason"] == "stop"


def test_booked_and_book_interrupted_serve_a_retried_attempt(books: RemoteStepBooks, store: Store) -> None:
    start = root(store)
    books.prepare(STEP, start, None)
    books.settle(STEP, call(attempt=1))
    assert [e.attempt for e in books.booked(STEP, before_attempt=2)] == [1]
    assert books.booked(STEP, before_attempt=1) == []
    backdate_prepares(store, "lease-1", 5.0)  # attempt 1 went quiet: the workflow starts attempt 2
    books.prepare(STEP, start, None, attempt=2)  # attempt 2 started, wrote 40 tokens and died unheard
    lost = [DeadTokens(2, "lost", 40, 0.0)]
    cut_seen(store, "t1", 1, 40)  # the workflow saw attempt 2 cut after 40 tokens
    books.book_interrupted(STEP, lost)
    books.book_interrupted(STEP, lost)
    books.book_interrupted(STEP, [])
    totals = store.ledger.totals("t1")
    assert totals.lost_tokens == 40 and totals.cost_usd == pytest.approx(30 * PROMPT_USD + 52 * COMPLETION_USD)
    assert [e.attempt for e in books.booked(STEP, before_attempt=3)] == [1]


def test_a_settle_books_its_call_and_announces_it_together_or_not_at_all(
    books: RemoteStepBooks, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ledger row and its event are one transaction: a settle that fails between them leaves neither, so
    the node's retry books and announces the call (a row without its event would stay unannounced, the retry
    seeing it booked already)."""
    books.prepare(STEP, root(store), None)

    def unwritable(*args: object) -> int:
        raise RuntimeError("the disk is full")

    with monkeypatch.context() as broken:
        broken.setattr(SqlEventLog, "append", unwritable)
        with pytest.raises(RuntimeError, match="the disk is full"):
            books.settle(STEP, call())
    assert store.ledger.entries("t1") == [] and store.events.read("t1") == []
    assert books.settle(STEP, call()).recorded is True
    assert len(store.ledger.entries("t1")) == 1 and [e.kind for e in store.events.read("t1")] == ["llm_call"]


def test_a_wrong_secret_is_refused_and_writes_nothing(app, node_secret: str, leased: None, store: Store) -> None:
    start = root(store)
    with RemoteStepBooks("http://berth", "gpu-books", lambda: "guess", transport=SyncAsgi(app)) as impostor:
        with pytest.raises(StepBooksRefused, match="secret of 'gpu-books' is missing or wrong") as refused:
            impostor.prepare(STEP, start, None)
        assert refused.value.status == 401 and not refused.value.permanent
        with pytest.raises(StepBooksRefused) as refused:
            impostor.settle(STEP, call())
        assert refused.value.status == 401
    with RemoteStepBooks("http://berth", "gpu-books", lambda: None, transport=SyncAsgi(app)) as anonymous:
        with pytest.raises(StepBooksRefused, match="401"):
            anonymous.book_interrupted(STEP, [DeadTokens(1, "lost", 5, 0.0)])
    assert store.leases.get("lease-1").reservation is None  # type: ignore[union-attr]
    assert store.events.read("t1") == [] and store.ledger.entries("t1") == []


def test_an_unknown_node_is_refused_and_writes_nothing(app, node_secret: str, leased: None, store: Store) -> None:
    with RemoteStepBooks("http://berth", "ghost", lambda: node_secret, transport=SyncAsgi(app)) as ghost:
        with pytest.raises(StepBooksRefused, match="secret of 'ghost' is missing or wrong") as refused:
            ghost.settle(STEP, call())  # as for a known node: a stranger cannot map node ids
        assert refused.value.status == 401 and not refused.value.permanent
    assert store.events.read("t1") == [] and store.ledger.entries("t1") == []


def test_a_released_lease_books_nothing_more(books: RemoteStepBooks, store: Store) -> None:
    """Reading and booking last exactly as long as the lease: its step released it, the node is done."""
    start = root(store)
    books.prepare(STEP, start, None)
    store.leases.release("lease-1")
    with pytest.raises(StepBooksRefused, match="holds no such lease") as refused:
        books.settle(STEP, call())
    assert refused.value.status == 403 and refused.value.permanent
    with pytest.raises(StepBooksRefused, match="403"):
        books.prepare(STEP, start, None)
    assert store.ledger.entries("t1") == [] and store.events.read("t1") == []


def test_a_step_waits_out_a_control_plane_restart_and_gives_up_only_after_its_wait(
    app, node_secret: str, leased: None, store: Store
) -> None:
    """Every step route is idempotent: a node asks again while the control plane is down, rather than losing a
    reply its engine already wrote (a server killed mid-task is restarted within seconds)."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    comes_back = threading.Timer(1.0, server.run)  # down for a second, then up on the same address
    comes_back.start()
    try:
        with RemoteStepBooks(f"http://127.0.0.1:{port}", "gpu-books", lambda: node_secret, retry_for_s=60) as books:
            prepared = books.prepare(STEP, root(store), None)
            assert prepared.max_tokens == 500 and books.settle(STEP, call()).recorded
    finally:
        server.should_exit = True
        comes_back.join(30)
    assert [e.attempt for e in store.ledger.entries("t1")] == [1]
    with RemoteStepBooks(
        f"http://127.0.0.1:{free_port()}", "gpu-books", lambda: node_secret, retry_for_s=0.5
    ) as nobody_there:
        with pytest.raises(httpx.ConnectError):
            nobody_there.settle(STEP, call(attempt=2))


WEATHER = {
    "type": "function",
    "function": {
        "name": "weather",
        "description": "The weather in a city, now and for the next three days, with wind and rain by the hour.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "units": {"type": "string", "enum": ["metric", "imperial"]}},
            "required": ["city"],
        },
    },
}
INSTRUCTIONS = "You are a careful forecaster. Answer in full sentences and always name the city."


def lease_with_extras(store: Store, step: int, instructions: str | None, tools: list[dict]) -> StepRef:
    """A lease for `step` whose workflow bound the call's own instructions and tools to its limits."""
    lease_id = f"lease-{step}"
    store.leases.add(
        LeaseRecord(
            lease_id=lease_id,
            task_id="t1",
            step=step,
            model="llama-3.2-1b",
            node_id="gpu-books",
            replica_id="r-1",
            tokens=500,
            tenant="default",
            limits=StepLimits(
                max_tokens=2000,
                token_allowance=2100,
                first_attempt=1,
                last_attempt=100,
                call_extras=call_extras_digest(instructions, tools),
            ),
        )
    )
    return StepRef("t1", step, "llama-3.2-1b", "default", lease_id=lease_id)


def test_a_calls_own_tools_and_instructions_are_reserved_for_and_its_long_answer_books(
    books: RemoteStepBooks, store: Store
) -> None:
    """An own loop's call offers tools the agent never registered: the prompt the engine then counts (tools and
    instructions included) must fit what the lease reserved, or a long answer is refused at its settle."""
    start = root(store)
    bare = lease_with_extras(store, 2, None, [])
    books.prepare(bare, start, None)
    bare_prompt = store.leases.get("lease-2").reservation.prompt_tokens  # type: ignore[union-attr]

    step = lease_with_extras(store, 3, INSTRUCTIONS, [WEATHER])
    prepared = books.prepare(step, start, None, INSTRUCTIONS, [WEATHER])
    reservation = store.leases.get("lease-3").reservation  # type: ignore[union-attr]
    assert reservation is not None and reservation.prompt_tokens > bare_prompt + 40
    assert prepared.max_tokens == reservation.max_tokens == 2100 - reservation.prompt_tokens
    # What the engine reports for that prompt, and an answer of every token granted, books.
    engine_prompt = reservation.prompt_tokens - 8
    settled = books.settle(step, call(prompt_tokens=engine_prompt, completion_tokens=prepared.max_tokens))
    assert settled.recorded


def test_extras_that_are_not_the_calls_are_refused_naming_tools(books: RemoteStepBooks, store: Store) -> None:
    """A node that sends other tools (fewer, to shrink the reservation and be granted more answer) is refused."""
    step = lease_with_extras(store, 2, INSTRUCTIONS, [WEATHER])
    with pytest.raises(StepBooksRefused, match="not those of step 2") as refused:
        books.prepare(step, root(store), None, INSTRUCTIONS, [])
    assert refused.value.status == 409 and "tools" in refused.value.message
    assert store.leases.get("lease-2").reservation is None  # type: ignore[union-attr]
