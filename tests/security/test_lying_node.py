"""A GPU node that lies in every field of its step bookkeeping, against the real routes and store.

The node is admitted (a per-node join token) and the pool gave it one lease: step 1 of tenant A's
task. Before, with that one lease, it read tenant B's whole conversation by naming B's checkpoint
id, booked 2**62 tokens at a negative price, booked 10**9 lost tokens, set A's task `completed`
with a forged result through `prepare`'s pending step, and stored an event dict that then made the
task's UI page answer 500. Each is refused here, naming the field, and changes nothing.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator

import httpx
import pytest

from orchestrator.store import CallReservation, Store
from sdk import AgentSpec, CheckpointRef, Message, Spend, TaskSpec, TaskState, TaskStatus, ToolSpec
from sdk.wire.fleet import NODE_SECRET_HEADER
from sdk.wire.identity import Role, TenantSpec
from sdk.wire.lease import StepLimits
from tests.security.parties import SyncAsgi, admitted_node, backdate_prepares, cut_seen, error_of, step_lease

NODE = "gpu-liar"
MAX_TOKENS, ALLOWANCE = 300, 1200


def task(store: Store, task_id: str, tenant: str, agent: AgentSpec, secret: str) -> CheckpointRef:
    state = TaskState(
        task_id=task_id,
        agent=agent.name,
        agent_version=agent.version,
        model="llama-3.2-1b",
        tenant=tenant,
        status=TaskStatus.running,
        max_steps=5,
        spend=Spend(token_limit=5000),
    )
    spec = TaskSpec(task_id=task_id, agent=agent.name, input=secret, budget={"tokens": 5000}, tenant=tenant)
    store.tasks.create(task_id, spec.model_dump_json(), state)
    return store.checkpoints.write_root(
        task_id, [Message(role="system", content="Be brief."), Message(role="user", content=secret)], {}
    )


@pytest.fixture
def agent(store: Store) -> AgentSpec:
    return store.agents.register(
        AgentSpec(
            name="scribe",
            model="llama-3.2-1b",
            instructions="Be brief.",
            tools=[ToolSpec(name="lookup", description="Look a word up.")],
        )
    )


@pytest.fixture
def world(store: Store, agent: AgentSpec) -> dict[str, CheckpointRef]:
    """Tenant A's task t-a (leased to the liar, step 1) and tenant B's task t-b (leased to an honest node)."""
    for name in ("acme", "globex"):
        store.tenants.create(TenantSpec(name=name))
    refs = {
        "t-a": task(store, "t-a", "acme", agent, "acme's own question"),
        "t-b": task(store, "t-b", "globex", agent, "globex's merger plans"),
    }
    limits = StepLimits(
        max_tokens=MAX_TOKENS, token_allowance=ALLOWANCE, first_attempt=101, last_attempt=200, round_first_attempt=1
    )
    store.leases.add(step_lease("lease-a", "t-a", "acme", NODE, "r-1", limits))
    store.leases.add(step_lease("lease-b", "t-b", "globex", "gpu-honest", "r-2", limits))
    return refs


@pytest.fixture
def node(app, store: Store, world: dict) -> Iterator[httpx.Client]:
    """The lying node, admitted and joined, speaking HTTP with its own secret."""
    with admitted_node(app, store, NODE) as http:
        yield http


def post(node: httpx.Client, route: str, body: dict) -> httpx.Response:
    return node.post(f"/v1/nodes/{NODE}/steps/{route}", json=body)


def prepared(node: httpx.Client, world: dict, attempt: int = 101) -> dict:
    answer = post(node, "prepare", {"lease_id": "lease-a", "attempt": attempt, "checkpoint": world["t-a"].model_dump()})
    assert answer.status_code == 200, answer.text
    return answer.json()


def earlier_placement(store: Store, attempts: tuple[int, ...], max_tokens: int) -> None:
    """Attempts of t-a's round that an earlier placement prepared, on a node since lost (its lease released): one
    lease a step at a time, so the liar's is set aside meanwhile."""
    held = store.leases.release("lease-a")
    assert held is not None
    limits = StepLimits(max_tokens=max_tokens, token_allowance=ALLOWANCE, first_attempt=1, last_attempt=100)
    store.leases.add(step_lease("lease-gone", "t-a", "acme", "gpu-gone", "r-0", limits))
    for attempt in attempts:
        store.leases.reserve_call("lease-gone", CallReservation(prompt_tokens=10, max_tokens=max_tokens), attempt)
    store.leases.release("lease-gone")
    store.leases.add(held)


def settle(**fields: object) -> dict:
    body: dict = {
        "lease_id": "lease-a",
        "attempt": 101,
        "prompt_tokens": 40,
        "completion_tokens": 20,
        "ttft_s": 0.1,
        "duration_s": 0.5,
        "response_id": "chatcmpl-1",
        "finish_reason": "stop",
    }
    body.update(fields)
    return body


def nothing_booked(store: Store) -> bool:
    return (
        store.ledger.entries("t-a") == []
        and store.ledger.entries("t-b") == []
        and [e for e in store.events.read("t-a") if e.kind == "llm_call"] == []
    )


def test_a_node_reads_only_the_current_checkpoint_of_the_task_it_leases_now(node, world, store: Store) -> None:
    stolen = post(node, "prepare", {"lease_id": "lease-a", "attempt": 101, "checkpoint": world["t-b"].model_dump()})
    assert stolen.status_code == 409 and error_of(stolen)["field"] == "checkpoint"
    assert "merger" not in stolen.text
    forged = world["t-a"].model_copy(update={"hash": "0" * 16})
    assert (
        post(node, "prepare", {"lease_id": "lease-a", "attempt": 101, "checkpoint": forged.model_dump()}).status_code
        == 409
    )
    # Another node's lease, a made-up one: as if the node held none.
    for lease_id in ("lease-b", "lease-nope"):
        refused = post(node, "prepare", {"lease_id": lease_id, "attempt": 101, "checkpoint": world["t-b"].model_dump()})
        assert refused.status_code == 403 and error_of(refused)["field"] == "lease_id", refused.text
        assert "merger" not in refused.text
    # Its own task's conversation, once the step moved on, is not "current" any more either.
    store.checkpoints.append("t-a", world["t-a"], 1, [Message(role="assistant", content="done")], {}, {})
    stale = post(node, "prepare", {"lease_id": "lease-a", "attempt": 101, "checkpoint": world["t-a"].model_dump()})
    assert stale.status_code == 409
    assert store.leases.get("lease-a").reservation is None  # type: ignore[union-attr]


def test_a_node_can_never_write_a_tasks_state_result_or_spend(node, world, store: Store) -> None:
    before = store.tasks.get("t-a")
    forged = TaskState(
        task_id="t-a",
        agent="scribe",
        agent_version="x",
        model="llama-3.2-1b",
        tenant="acme",
        status=TaskStatus.completed,
        max_steps=5,
        result="forged",
        spend=Spend(token_limit=10**9),
    )
    refused = post(
        node,
        "prepare",
        {
            "lease_id": "lease-a",
            "attempt": 101,
            "checkpoint": world["t-a"].model_dump(),
            "pending": {"step": 1, "new_messages": [], "state": forged.model_dump(mode="json")},
        },
    )
    assert refused.status_code == 422 and error_of(refused)["field"] == "pending"
    assert store.tasks.get("t-a") == before and store.checkpoints.latest("t-a") == world["t-a"]


def test_the_control_plane_counts_the_prompt_and_grants_within_the_lease(node, world, store: Store) -> None:
    body = prepared(node, world)
    assert [m["content"] for m in body["messages"]] == ["Be brief.", "acme's own question"]
    reservation = store.leases.get("lease-a").reservation  # type: ignore[union-attr]
    assert reservation is not None and body["max_tokens"] == reservation.max_tokens == MAX_TOKENS
    # The agent's tool schema is part of the prompt counted: more than the two short messages alone.
    assert 40 < reservation.prompt_tokens < 200


@pytest.mark.parametrize(
    "lie, field",
    [
        ({"completion_tokens": 2**62}, "completion_tokens"),
        ({"prompt_tokens": 2**62}, "prompt_tokens"),
        ({"completion_tokens": MAX_TOKENS + 1}, "completion_tokens"),
        ({"prompt_tokens": 900, "completion_tokens": 10}, "prompt_tokens"),
        ({"prompt_tokens": -5}, "prompt_tokens"),
        ({"cost_usd": -5.0}, "cost_usd"),
        ({"attempt": 7}, "attempt"),  # an attempt number of another placement of the step
        ({"attempt": 2**63}, "attempt"),
        ({"continued_tokens": 50}, "continued_tokens"),  # no kept text to have continued
        ({"ttft_s": 1e300}, "ttft_s"),
        ({"tool_calls": ["x"] * 1000}, "tool_calls"),
        ({"response_id": "r" * 5000}, "response_id"),
        ({"event": {"x": {"deep": [1]}}}, "event"),
        ({"task_id": "t-b"}, "task_id"),
    ],
)
def test_settle_is_bounded_by_the_lease_and_priced_here(node, world, store: Store, lie: dict, field: str) -> None:
    prepared(node, world)
    refused = post(node, "settle", settle(**lie))
    assert refused.status_code == 422 and error_of(refused)["field"] == field, refused.text
    assert nothing_booked(store)


def test_a_settle_before_the_call_was_prepared_is_refused(node, world, store: Store) -> None:
    refused = post(node, "settle", settle())
    assert refused.status_code == 422 and error_of(refused)["field"] == "attempt"
    prepared(node, world, 101)
    another = post(node, "settle", settle(attempt=102))  # an attempt of its own, but not the one it prepared
    assert another.status_code == 422 and error_of(another)["field"] == "attempt", another.text
    assert nothing_booked(store)


def test_a_node_prepares_only_attempts_of_its_own_placement(node, world, store: Store) -> None:
    for attempt in (100, 201):
        refused = post(
            node, "prepare", {"lease_id": "lease-a", "attempt": attempt, "checkpoint": world["t-a"].model_dump()}
        )
        assert refused.status_code == 422 and error_of(refused)["field"] == "attempt", refused.text
    assert store.leases.prepared_attempts("t-a", 1, 1) == {}


def test_an_honest_size_settle_is_booked_once_at_the_catalogues_price_under_the_lease(
    node, world, store: Store
) -> None:
    prepared(node, world)
    booked = post(
        node,
        "settle",
        settle(
            placement={
                "lease_id": "lease-b",
                "node_id": "gpu-honest",
                "replica_id": "r-2",
                "gpu_indexes": [0],
                "tier": "warm",
                "queue_wait_s": 0.3,
            }
        ),
    )
    assert booked.status_code == 200 and booked.json()["recorded"] is True
    assert booked.json()["cost_usd"] == pytest.approx(40 * 0.05e-6 + 20 * 0.10e-6)
    [entry] = store.ledger.entries("t-a")
    assert (entry.task_id, entry.step, entry.served_by) == ("t-a", 1, f"{NODE}/r-1")
    [event] = [e for e in store.events.read("t-a") if e.kind == "llm_call"]
    # Where it ran is the lease's, whatever the node wrote; the tenant is the task's.
    assert (event.data["node_id"], event.data["replica_id"], event.data["tenant"]) == (NODE, "r-1", "acme")
    assert store.ledger.entries("t-b") == []


@pytest.mark.parametrize(
    "entries, field",
    [
        ([{"attempt": 101, "kind": "lost", "tokens": 10**9}], "entries.0.tokens"),
        ([{"attempt": 101, "kind": "lost", "tokens": MAX_TOKENS + 1}], "entries.0.tokens"),
        ([{"attempt": 101, "kind": "lost", "tokens": 0}], "entries.0.tokens"),
        ([{"attempt": 201, "kind": "kept", "tokens": 10}], "entries.0.attempt"),
        ([{"attempt": 101, "kind": "settled", "tokens": 10}], "entries.0.kind"),
        # An attempt of the round that never started: nothing was prepared for it.
        ([{"attempt": 1, "kind": "lost", "tokens": 10}], "entries.0.attempt"),
        (
            [{"attempt": 101, "kind": "lost", "tokens": 5}, {"attempt": 104, "kind": "lost", "tokens": 5}],
            "entries.1.attempt",
        ),
        # Lost and kept of one attempt are what it wrote: together at most its grant.
        (
            [{"attempt": 101, "kind": "lost", "tokens": MAX_TOKENS}, {"attempt": 101, "kind": "kept", "tokens": 1}],
            "entries.1.tokens",
        ),
        # Each within an answer's size, together beyond what the step may book in all.
        ([{"attempt": a, "kind": "lost", "tokens": MAX_TOKENS} for a in (2, 3, 101, 102, 103)], "tokens"),
    ],
)
def test_dead_attempts_tokens_are_bounded_by_the_lease(node, world, store: Store, entries: list, field: str) -> None:
    cut_seen(store, "t-a", 1, 10 * ALLOWANCE)  # ample evidence of cuts: the lease's own bounds are the rules here
    earlier_placement(store, (2, 3), MAX_TOKENS)
    for attempt in (101, 102, 103):  # three attempts started here (the later two continuing a quiet one)
        backdate_prepares(store, "lease-a", 5.0)
        assert prepared(node, world, attempt)["max_tokens"] == MAX_TOKENS
    refused = post(node, "interrupted", {"lease_id": "lease-a", "entries": entries})
    assert refused.status_code == 422 and error_of(refused)["field"] == field, refused.text
    assert nothing_booked(store)


def test_whatever_a_node_books_the_step_stays_within_its_allowance(node, world, store: Store) -> None:
    """Up to the limit and no further: lost tokens of three attempts it started first, then the call, each at its
    bound."""
    cut_seen(store, "t-a", 1, 10 * ALLOWANCE)
    for attempt in (101, 102, 103):
        backdate_prepares(store, "lease-a", 5.0)
        prepared(node, world, attempt)
    lost = [MAX_TOKENS, MAX_TOKENS, MAX_TOKENS - 1]
    assert (
        post(
            node,
            "interrupted",
            {
                "lease_id": "lease-a",
                "entries": [{"attempt": a, "kind": "lost", "tokens": t} for a, t in zip((101, 102, 103), lost)],
            },
        ).status_code
        == 204
    )
    backdate_prepares(store, "lease-a", 5.0)
    body = prepared(node, world, 104)
    reservation = store.leases.get("lease-a").reservation  # type: ignore[union-attr]
    assert body["max_tokens"] == ALLOWANCE - sum(lost) - reservation.prompt_tokens  # type: ignore[union-attr]
    too_much = post(
        node,
        "settle",
        settle(
            attempt=104,
            prompt_tokens=reservation.prompt_tokens,  # type: ignore[union-attr]
            completion_tokens=body["max_tokens"] + 1,
        ),
    )
    assert too_much.status_code == 422
    assert (
        post(
            node,
            "settle",
            settle(
                attempt=104,
                prompt_tokens=reservation.prompt_tokens,  # type: ignore[union-attr]
                completion_tokens=body["max_tokens"],
            ),
        ).status_code
        == 200
    )
    assert store.ledger.totals("t-a").tokens == ALLOWANCE
    # Attempt 103 could have written one more token (kept), but the step has nothing left to book it with.
    more = post(
        node, "interrupted", {"lease_id": "lease-a", "entries": [{"attempt": 103, "kind": "kept", "tokens": 1}]}
    )
    assert more.status_code == 422 and error_of(more)["field"] == "tokens"
    assert store.ledger.totals("t-a").tokens == ALLOWANCE


async def test_the_task_page_shows_what_a_node_wrote_escaped(node, world, app, store: Store) -> None:
    """The event is the control plane's typed model: a node's strings are bounded, shown escaped, never a 500."""
    await asyncio.to_thread(prepared, node, world)  # the node's client is synchronous, as a node's books are
    hostile = "<script>alert(1)</script>"
    booked = await asyncio.to_thread(post, node, "settle", settle(finish_reason=hostile[:32], tool_calls=[hostile]))
    assert booked.status_code == 200
    key = store.keys.create(Role.admin, name="ui").key
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://berth") as browser:
        form = await browser.get("/login")
        csrf = re.search(r'name="csrf_token" value="([^"]+)"', form.text).group(1)  # type: ignore[union-attr]
        await browser.post("/login", data={"api_key": key, "csrf_token": csrf})
        page = await browser.get("/tasks/t-a")
    assert page.status_code == 200 and "<script>alert" not in page.text


def test_a_pending_node_reads_and_books_nothing(app, store: Store, world) -> None:
    """A node that joined with the (stolen) cluster token waits for an operator: no lease of its is honoured."""
    from tests.security.parties import JOIN_TOKEN

    with httpx.Client(transport=SyncAsgi(app), base_url="http://berth") as http:
        joined = http.post(
            "/v1/nodes/register",
            json={
                "node_id": "gpu-rogue",
                "join_token": JOIN_TOKEN,
                "datacenter": "dc1",
                "zone": "z1",
                "gpus": [{"index": 0, "uuid": "GPU-9", "type_name": "H100-80GB", "memory_total_mib": 81559}],
            },
        )
        assert joined.status_code == 201 and joined.json()["node"]["status"] == "pending"
        limits = StepLimits(max_tokens=10, token_allowance=100)
        store.leases.add(step_lease("lease-r", "t-b", "globex", "gpu-rogue", "r-9", limits, step=2))
        refused = http.post(
            "/v1/nodes/gpu-rogue/steps/prepare",
            headers={NODE_SECRET_HEADER: joined.json()["node_secret"]},
            json={"lease_id": "lease-r", "attempt": 1, "checkpoint": world["t-b"].model_dump()},
        )
    assert refused.status_code == 403 and "merger" not in refused.text
