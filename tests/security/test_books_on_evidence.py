"""A lease books only what its attempts could have produced: attempts the control plane saw start, each at most its
grant (issue 34, "Books only on evidence").

Before, an admitted node holding a fresh lease (budget 20,000, max_tokens 8,000) called `steps/interrupted` for
attempts 1, 2 and 3 of its round before generating anything: 8,000 + 8,000 + 3,999 = 19,999 tokens booked as
lost, the task left in `awaiting_budget` with no call made. Each entry was bounded by max_tokens, the attempt
range was 100 wide, and the sum by the round's allowance (the task's whole remainder). Now an attempt's tokens
are booked only when a node prepared that attempt (the control plane recorded it, with what it reserved), and
what an attempt wrote (its answer, what it lost, what it kept) is at most the grant it was given.

The real routes and store, a node admitted with its own secret; the property test plays a node choosing any
sequence of prepare, settle and interrupted calls with any numbers.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.store import CallReservation, LeaseRecord, Store
from sdk import CheckpointRef, Message, Spend, TaskSpec, TaskState, TaskStatus
from sdk.wire.lease import StepLimits
from sdk.wire.ledger import SETTLED
from sdk.wire.recovery import QUIET_CONTINUES
from tests.security.parties import admitted_node, backdate_prepares, cut_seen, error_of, step_lease

NODE = "gpu-claims"
BUDGET, MAX_TOKENS = 20_000, 8_000
_TASKS = itertools.count()


def leased_task(
    store: Store,
    *,
    first_attempt: int = 1,
    earlier: dict[int, CallReservation] | None = None,
    quiet_after_s: float | None = None,
) -> tuple[str, CheckpointRef]:
    """A running task whose step 1 the node leases now, as a placement starting at `first_attempt` of a round from
    attempt 1. `earlier`: attempts an earlier placement of the round prepared, under a lease since released (its
    node was lost), with what was reserved for each."""
    task_id = f"t-claims-{next(_TASKS)}"
    state = TaskState(
        task_id=task_id,
        agent="scribe",
        agent_version="1",
        model="llama-3.2-1b",
        tenant="default",
        status=TaskStatus.running,
        max_steps=5,
        spend=Spend(token_limit=BUDGET),
    )
    spec = TaskSpec(task_id=task_id, agent="scribe", input="hi", budget={"tokens": BUDGET})
    store.tasks.create(task_id, spec.model_dump_json(), state)
    ref = store.checkpoints.write_root(task_id, [Message(role="user", content="What is a berth?")], {})

    def lease(lease_id: str, node_id: str, first: int) -> LeaseRecord:
        limits = StepLimits(
            max_tokens=MAX_TOKENS,
            token_allowance=BUDGET,
            first_attempt=first,
            last_attempt=first + 99,
            round_first_attempt=1,
            quiet_after_s=quiet_after_s,
        )
        return step_lease(lease_id, task_id, "default", node_id, "r-1", limits)

    if earlier:
        store.leases.add(lease(f"{task_id}-gone", "gpu-gone", 1))
        for attempt, reservation in earlier.items():
            store.leases.reserve_call(f"{task_id}-gone", reservation, attempt)
        store.leases.release(f"{task_id}-gone")
    store.leases.add(lease(task_id, NODE, first_attempt))
    return task_id, ref


@pytest.fixture
def node(app, store: Store) -> Iterator[httpx.Client]:
    """An admitted node speaking HTTP with its own secret."""
    with admitted_node(app, store, NODE) as http:
        yield http


def post(node: httpx.Client, route: str, body: dict) -> httpx.Response:
    return node.post(f"/v1/nodes/{NODE}/steps/{route}", json=body)


def prepare(node: httpx.Client, task_id: str, ref: CheckpointRef, attempt: int) -> httpx.Response:
    return post(node, "prepare", {"lease_id": task_id, "attempt": attempt, "checkpoint": ref.model_dump()})


def lost(task_id: str, *claims: tuple[int, int]) -> dict:
    return {"lease_id": task_id, "entries": [{"attempt": a, "kind": "lost", "tokens": t} for a, t in claims]}


def test_a_fresh_lease_books_nothing_for_attempts_that_never_started(node, store: Store) -> None:
    """The finding: attempts 1, 2 and 3 claimed dead at their largest before any call was made."""
    task_id, _ = leased_task(store)
    refused = post(
        node, "interrupted", lost(task_id, (1, MAX_TOKENS), (2, MAX_TOKENS), (3, BUDGET - 2 * MAX_TOKENS - 1))
    )
    assert refused.status_code == 422, refused.text
    assert error_of(refused)["field"] == "entries.0.attempt" and "never started" in error_of(refused)["message"]
    one = post(node, "interrupted", lost(task_id, (1, 1)))
    assert one.status_code == 422 and error_of(one)["field"] == "entries.0.attempt"
    assert store.ledger.entries(task_id) == []


def test_a_started_attempt_books_at_most_its_grant_and_no_other_attempt(node, store: Store) -> None:
    """One prepare is evidence of one attempt: what it could have written (its grant), never a second attempt's."""
    task_id, ref = leased_task(store)
    cut_seen(store, task_id, 1, 10 * BUDGET)  # ample evidence of cut generations: the grant is the rule here
    granted = prepare(node, task_id, ref, 1).json()["max_tokens"]
    assert granted == MAX_TOKENS
    more = post(node, "interrupted", lost(task_id, (1, granted + 1)))
    assert more.status_code == 422 and error_of(more)["field"] == "entries.0.tokens"
    others = post(node, "interrupted", lost(task_id, (1, granted), (2, granted), (3, 3_999)))
    assert others.status_code == 422 and error_of(others)["field"] == "entries.1.attempt"
    assert post(node, "interrupted", lost(task_id, (1, granted))).status_code == 204
    # The dead attempt's tokens are its answer: it settles none on top of them.
    settle = {
        "lease_id": task_id,
        "attempt": 1,
        "prompt_tokens": 10,
        "completion_tokens": 1,
        "ttft_s": 0.1,
        "duration_s": 0.2,
    }
    refused = post(node, "settle", settle)
    assert refused.status_code == 422 and error_of(refused)["field"] == "completion_tokens", refused.text
    assert store.ledger.totals(task_id).tokens == granted < BUDGET - MAX_TOKENS


def test_the_placement_that_takes_a_step_over_books_what_the_cut_one_started(node, store: Store) -> None:
    """Honest recovery still books: a node lost mid-generation (its lease released) had prepared attempt 1; the
    node the step moved to (attempts 101 on) books what attempt 1 wrote, kept and lost, within its grant."""
    cut = CallReservation(prompt_tokens=20, max_tokens=600)
    task_id, ref = leased_task(store, first_attempt=101, earlier={1: cut})
    cut_seen(store, task_id, 1, 190)  # the workflow's record of the cut: 150 carried on, 40 not
    assert store.leases.get(f"{task_id}-gone") is None
    kept = {"lease_id": task_id, "entries": [{"attempt": 1, "kind": "kept", "tokens": 150}]}
    assert post(node, "interrupted", kept).status_code == 204
    assert post(node, "interrupted", lost(task_id, (1, 40))).status_code == 204
    assert post(node, "interrupted", lost(task_id, (1, 40))).status_code == 204  # retried: booked once
    beyond = post(node, "interrupted", lost(task_id, (2, 1)))  # the cut placement never started attempt 2
    assert beyond.status_code == 422 and error_of(beyond)["field"] == "entries.0.attempt"
    assert prepare(node, task_id, ref, 101).status_code == 200
    totals = store.ledger.totals(task_id)
    assert (totals.kept_tokens, totals.lost_tokens) == (150, 40)


def test_dead_tokens_are_booked_only_as_far_as_the_steps_cuts_were_seen(node, store: Store) -> None:
    """The finding, as it stood after prepares were bounded: a started attempt claimed dead with its whole grant
    (8,000 tokens) though nothing was generated. Now a step's dead tokens are at most what its cut generations'
    heartbeats carried, as the workflow recorded them when it moved the step on: nothing, for a step never cut."""
    task_id, ref = leased_task(store)
    granted = prepare(node, task_id, ref, 1).json()["max_tokens"]
    unseen = post(node, "interrupted", lost(task_id, (1, granted)))
    assert unseen.status_code == 422 and error_of(unseen)["field"] == "entries.0.tokens", unseen.text
    assert "seen to write 0 tokens" in error_of(unseen)["message"]
    assert post(node, "interrupted", lost(task_id, (1, 1))).status_code == 422
    assert store.ledger.entries(task_id) == []

    cut_seen(store, task_id, 1, 300)  # the workflow saw a generation cut after 300 tokens
    cut_seen(store, task_id, 2, 5_000)  # another step's cut is no evidence for this one
    assert post(node, "interrupted", lost(task_id, (1, 301))).status_code == 422
    kept = {"lease_id": task_id, "entries": [{"attempt": 1, "kind": "kept", "tokens": 200}]}
    assert post(node, "interrupted", kept).status_code == 204
    beyond = post(node, "interrupted", lost(task_id, (1, 101)))
    assert beyond.status_code == 422 and "200 are booked already" in error_of(beyond)["message"]
    assert post(node, "interrupted", lost(task_id, (1, 100))).status_code == 204
    totals = store.ledger.totals(task_id)
    assert (totals.kept_tokens, totals.lost_tokens) == (200, 100)


def test_a_lease_prepares_only_the_attempts_its_workflow_can_start(node, store: Store) -> None:
    """A node cannot mint attempts to claim: a placement runs its first attempt, and the workflow starts the next
    only once the one before went quiet for a heartbeat timeout, at most QUIET_CONTINUES times. Before, a node could
    prepare attempts 1 to 100 of its lease at once, each with a grant it could then claim was written and lost."""
    task_id, ref = leased_task(store)
    granted = prepare(node, task_id, ref, 1).json()["max_tokens"]
    at_once = prepare(node, task_id, ref, 2)
    assert at_once.status_code == 422 and error_of(at_once)["field"] == "attempt", at_once.text
    assert "prepared 0." in error_of(at_once)["message"]
    skipped = prepare(node, task_id, ref, 3)
    assert skipped.status_code == 422 and "never prepared" in error_of(skipped)["message"]
    # With a cut seen (else it books nothing dead): one attempt's grant at once, where it booked 19,999 before.
    cut_seen(store, task_id, 1, BUDGET)
    assert post(node, "interrupted", lost(task_id, (1, granted))).status_code == 204
    assert post(node, "interrupted", lost(task_id, (2, granted))).status_code == 422
    assert store.ledger.totals(task_id).tokens == granted == MAX_TOKENS

    for attempt in range(2, 2 + QUIET_CONTINUES):  # each continuation after its predecessor went quiet
        backdate_prepares(store, task_id, 5.0)
        assert prepare(node, task_id, ref, attempt).status_code == 200, attempt
        assert prepare(node, task_id, ref, attempt).status_code == 200  # a prepare retried
    backdate_prepares(store, task_id, 5.0)
    beyond = prepare(node, task_id, ref, 2 + QUIET_CONTINUES)
    assert beyond.status_code == 422 and error_of(beyond)["field"] == "attempt"
    assert f"attempts 1 to {1 + QUIET_CONTINUES}" in error_of(beyond)["message"]


def test_a_continuation_waits_for_the_tasks_own_heartbeat_timeout(node, store: Store) -> None:
    """The workflow puts the task's heartbeat timeout in the lease: a task whose generations may go quiet 20 s gets
    its continuation's prepare no sooner than 10 s after the one before, whatever the control plane's own setting."""
    task_id, ref = leased_task(store, quiet_after_s=20.0)
    assert prepare(node, task_id, ref, 1).status_code == 200
    backdate_prepares(store, task_id, 6.0)  # enough for the control plane's default 5 s, not for this task's 20 s
    early = prepare(node, task_id, ref, 2)
    assert early.status_code == 422 and "went quiet for 20 s" in error_of(early)["message"], early.text
    backdate_prepares(store, task_id, 5.0)
    assert prepare(node, task_id, ref, 2).status_code == 200


# ----- the property: a lease books at most what its attempts could have produced -------------------------------

ATTEMPTS = st.sampled_from([1, 2, 3, 100, 101, 102, 103, 200, 201])  # earlier placement, this one's, beyond it
TOKENS = st.one_of(st.integers(0, 50), st.integers(0, 10_000), st.sampled_from([MAX_TOKENS, BUDGET, 2**31]))
ACTIONS = st.lists(
    st.one_of(
        st.tuples(st.just("prepare"), ATTEMPTS),
        st.tuples(st.just("settle"), ATTEMPTS, TOKENS, TOKENS),
        st.tuples(
            st.just("interrupted"),
            st.lists(st.tuples(ATTEMPTS, st.sampled_from(["lost", "kept"]), TOKENS), min_size=1, max_size=4),
        ),
    ),
    max_size=12,
)
EARLIER = st.dictionaries(
    st.sampled_from([1, 2, 3]),
    st.builds(CallReservation, prompt_tokens=st.integers(0, 100), max_tokens=st.integers(0, MAX_TOKENS)),
    max_size=3,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(earlier=EARLIER, actions=ACTIONS, seen=st.sampled_from([0, 50, 5_000, 10 * BUDGET]))
def test_a_lease_books_at_most_what_its_attempts_could_have_produced(
    node, store: Store, earlier: dict[int, CallReservation], actions: list[tuple], seen: int
) -> None:
    task_id, ref = leased_task(store, first_attempt=101, earlier=earlier)
    if seen:
        cut_seen(store, task_id, 1, seen)  # what the workflow recorded of the step's cuts
    # What the node was given, as it saw it: each attempt's largest grant (an earlier placement's, or a prepare's;
    # a prepare of the same attempt again grants no more, as the round has booked more meanwhile).
    grants = {a: (r.prompt_tokens, r.max_tokens) for a, r in earlier.items()}
    for action in actions:
        if action[0] == "prepare":
            answer = prepare(node, task_id, ref, action[1])
            if answer.status_code == 200:
                reservation = store.leases.get(task_id).reservation  # type: ignore[union-attr]
                assert reservation is not None and reservation.max_tokens == answer.json()["max_tokens"]
                prompt, granted = grants.get(action[1], (0, 0))
                grants[action[1]] = (max(prompt, reservation.prompt_tokens), max(granted, reservation.max_tokens))
            else:
                assert answer.status_code == 422 and error_of(answer)["field"] == "attempt", answer.text
        elif action[0] == "settle":
            _, attempt, prompt, completion = action
            body = {"lease_id": task_id, "attempt": attempt, "prompt_tokens": prompt, "completion_tokens": completion}
            assert post(node, "settle", {**body, "ttft_s": 0.1, "duration_s": 0.2}).status_code in (200, 422)
        else:
            entries = [{"attempt": a, "kind": k, "tokens": t} for a, k, t in action[1]]
            answer = post(node, "interrupted", {"lease_id": task_id, "entries": entries})
            assert answer.status_code in (204, 422), answer.text

    written: dict[int, int] = {}
    for entry in store.ledger.entries(task_id):
        assert entry.attempt in grants, f"attempt {entry.attempt} booked, but it never started"
        written[entry.attempt] = written.get(entry.attempt, 0) + entry.completion_tokens
        if entry.kind == SETTLED:
            prompt, granted = grants[entry.attempt]
            assert entry.prompt_tokens + entry.completion_tokens <= prompt + granted
    for attempt, tokens in written.items():
        assert tokens <= grants[attempt][1], (attempt, tokens, grants[attempt])
    totals = store.ledger.totals(task_id)
    assert totals.tokens <= sum(p + g for p, g in grants.values()) and totals.tokens <= BUDGET
    assert totals.lost_tokens + totals.kept_tokens <= seen
