"""The LLM step activity against a real engine: reservation, shortfall, and a retried attempt
that books what its dead predecessor generated as lost tokens, paid from the same allowance."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.testing import ActivityEnvironment

from activities.llm_step import LlmStepActivities
from activities.step.store_books import StoreStepBooks
from orchestrator.catalogue import ModelCatalogue
from orchestrator.config import BerthConfig
from orchestrator.engines.simulated import EngineThread
from orchestrator.store import Store
from sdk import Message
from sdk.wire.contracts import GenerationProgress, LlmStepInput, Shortfall


@pytest.fixture(scope="module")
def engine() -> Iterator[EngineThread]:
    with EngineThread(latency_scale=0) as e:
        yield e


@pytest.fixture
def step(engine: EngineThread, tmp_path: Path) -> tuple[LlmStepActivities, Store, LlmStepInput]:
    store = Store.open(f"sqlite:///{tmp_path / 'b.db'}")
    root = store.checkpoints.write_root("t1", [Message(role="user", content="Explain KV caches")], {})
    acts = LlmStepActivities(
        StoreStepBooks(store.checkpoints, store.tasks, store.events, store.ledger),
        ModelCatalogue(BerthConfig(engine_url=engine.base_url)),
    )
    inp = LlmStepInput(
        task_id="t1", step=1, checkpoint=root, model="llama-3.2-1b", max_tokens=200, token_allowance=10_000
    )
    return acts, store, inp


async def test_a_call_books_exactly_what_the_engine_reports(step, engine: EngineThread) -> None:
    acts, store, inp = step
    result = await ActivityEnvironment().run(acts.generate, inp)
    usage = engine.tally.snapshot()["by_task"]["t1"]
    assert (result.prompt_tokens, result.completion_tokens) == (usage["prompt_tokens"], usage["completion_tokens"])
    totals = store.ledger.totals("t1")
    assert (totals.prompt_tokens, totals.completion_tokens, totals.calls) == (
        result.prompt_tokens,
        result.completion_tokens,
        1,
    )
    assert result.cost_usd > 0 and result.message.content


async def test_an_allowance_too_small_for_the_prompt_is_a_shortfall_not_a_call(step, engine: EngineThread) -> None:
    acts, store, inp = step
    before = engine.tally.snapshot()["total"]["requests"]
    result = await ActivityEnvironment().run(acts.generate, inp.model_copy(update={"token_allowance": 20}))
    assert isinstance(result, Shortfall) and result.shortfall_tokens > 0
    assert engine.tally.snapshot()["total"]["requests"] == before
    assert store.ledger.totals("t1").calls == 0


async def test_max_tokens_shrinks_to_the_allowance(step) -> None:
    acts, _, inp = step
    result = await ActivityEnvironment().run(acts.generate, inp.model_copy(update={"token_allowance": 60}))
    assert result.prompt_tokens + result.completion_tokens <= 60
    assert result.budget_limited


async def test_a_retry_books_the_dead_attempts_tokens_as_lost(step) -> None:
    acts, store, inp = step
    env = ActivityEnvironment()
    env.info = dataclasses.replace(
        env.info, attempt=3, heartbeat_details=[{"attempt": 2, "generated": 40, "lost_before": 25}]
    )
    result = await env.run(acts.generate, inp.model_copy(update={"token_allowance": 200}))
    assert result.lost_tokens == 65
    assert result.tokens_charged <= 200  # the lost tokens came out of the same allowance
    lost = [e for e in store.ledger.entries("t1") if e.kind == "lost"]
    assert [(e.attempt, e.completion_tokens) for e in lost] == [(2, 40)]
    assert store.ledger.totals("t1").lost_tokens == 40  # attempt 1's 25 were booked by attempt 2


async def test_a_retry_after_a_finished_reply_gets_it_back_instead_of_paying_twice(step, engine: EngineThread) -> None:
    import httpx

    acts, store, inp = step
    inp = inp.model_copy(update={"task_id": "t-replay"})
    store.checkpoints.write_root("t-replay", [Message(role="user", content="Explain KV caches")], {})
    inp = inp.model_copy(update={"checkpoint": store.checkpoints.latest("t-replay")})
    # Attempt 1 got its whole reply from the engine, then its worker died before booking it.
    body = {"model": "llama-3.2-1b", "messages": [{"role": "user", "content": "Explain KV caches"}], "max_tokens": 200}
    headers = {"Idempotency-Key": "t-replay/1", "X-Berth-Task": "t-replay"}
    first = httpx.post(f"{engine.base_url}/chat/completions", json=body, headers=headers).json()

    env = ActivityEnvironment()
    env.info = dataclasses.replace(
        env.info,
        attempt=2,
        heartbeat_details=[
            {"attempt": 1, "generated": 12, "response_id": first["id"], "lost_before": 0, "unresolved": []}
        ],
    )
    result = await env.run(acts.generate, inp)

    assert result.lost_tokens == 0
    assert result.completion_tokens == first["usage"]["completion_tokens"]
    assert [(e.attempt, e.kind) for e in store.ledger.entries("t-replay")] == [(2, "settled")]
    assert engine.tally.snapshot()["by_task"]["t-replay"]["requests"] == 1  # generated and counted once


async def test_a_retry_after_a_booked_reply_books_nothing_twice(step, engine: EngineThread) -> None:
    acts, store, inp = step
    inp = inp.model_copy(update={"task_id": "t-booked"})
    store.checkpoints.write_root("t-booked", [Message(role="user", content="Explain KV caches")], {})
    inp = inp.model_copy(update={"checkpoint": store.checkpoints.latest("t-booked")})
    first = await ActivityEnvironment().run(acts.generate, inp)  # booked, then "died" before Temporal heard

    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, attempt=2)
    again = await env.run(acts.generate, inp)

    assert (again.prompt_tokens, again.completion_tokens, again.lost_tokens) == (
        first.prompt_tokens,
        first.completion_tokens,
        0,
    )
    assert [(e.attempt, e.kind) for e in store.ledger.entries("t-booked")] == [(1, "settled")]
    assert engine.tally.snapshot()["by_task"]["t-booked"]["requests"] == 1


async def test_a_booked_reply_the_engine_cannot_replay_is_charged_not_hidden(step) -> None:
    from sdk.wire.ledger import LedgerEntry

    acts, store, inp = step
    inp = inp.model_copy(update={"task_id": "t-gone"})
    store.checkpoints.write_root("t-gone", [Message(role="user", content="Explain KV caches")], {})
    inp = inp.model_copy(update={"checkpoint": store.checkpoints.latest("t-gone")})
    store.ledger.record(
        LedgerEntry(
            "t-gone",
            1,
            1,
            "llama-3.2-1b",
            30,
            20,
            0.001,
            0.1,
            0.2,
            "elsewhere",
            response_id="chatcmpl-from-an-engine-that-forgot",
        )
    )
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, attempt=2)
    result = await env.run(acts.generate, inp)
    assert result.lost_tokens == 50  # the earlier booked reply: real spend the workflow never saw
    assert result.tokens_charged == 50 + result.prompt_tokens + result.completion_tokens
    totals = store.ledger.totals("t-gone")
    assert totals.prompt_tokens + totals.completion_tokens + totals.lost_tokens == result.tokens_charged


async def test_a_leased_step_records_where_it_ran(step) -> None:
    from sdk.wire.lease import StepPlacement

    acts, store, inp = step
    placement = StepPlacement(
        node_id="gpu-a",
        replica_id="r-7",
        gpu_indexes=[0, 1],
        gpu_type="H100-80GB",
        tier="warm",
        decided_by="queue",
        queue_wait_s=0.4,
        load_s=0.0,
    )
    result = await ActivityEnvironment().run(acts.generate, inp.model_copy(update={"placement": placement}))
    assert result.placement == placement
    [call] = [e for e in store.events.read("t1") if e.kind == "llm_call"]
    assert {
        k: call.data[k]
        for k in ("node_id", "replica_id", "gpu_indexes", "gpu_type", "tier", "decided_by", "queue_wait_s", "load_s")
    } == placement.model_dump(exclude={"lease_id"})
    assert call.data["completion_tokens"] == result.completion_tokens

    short = await ActivityEnvironment().run(
        acts.generate, inp.model_copy(update={"placement": placement, "token_allowance": 20})
    )
    assert isinstance(short, Shortfall) and short.shortfall_tokens and short.placement == placement


LONG_INPUT = "alpha; beta\nlength: 400 tokens"
PLACEMENT_KEYS = dict(
    node_id="gpu-b",
    replica_id="r-9",
    gpu_indexes=[0],
    gpu_type="A100-40GB",
    tier="warm",
    decided_by="queue",
    queue_wait_s=0.0,
    load_s=0.0,
)


def _long_step(store: Store, task_id: str, inp: LlmStepInput, **update: object) -> LlmStepInput:
    from sdk.wire.lease import StepPlacement

    root = store.checkpoints.write_root(task_id, [Message(role="user", content=LONG_INPUT)], {})
    if isinstance(update.get("inherited_progress"), dict):  # the workflow sends it typed
        update["inherited_progress"] = GenerationProgress.model_validate(update["inherited_progress"])
    return inp.model_copy(
        update={
            "task_id": task_id,
            "checkpoint": root,
            "max_tokens": 1000,
            "placement": StepPlacement(**PLACEMENT_KEYS),
            **update,
        }
    )


def _cut_after(text: str, chars: int, generated_beyond: int, **details: object) -> dict:
    """The last heartbeat of a generation cut after writing text[:chars] (and `generated_beyond` more tokens)."""
    from activities.step.tokens import encode

    prefix = text[:chars]
    written = len(encode(prefix))
    return {
        "attempt": 1,
        "generated": written + generated_beyond,
        "response_id": "chatcmpl-dead",
        "lost_before": 0,
        "kept_before": 0,
        "unresolved": [],
        "prefix": prefix,
        "prefix_tokens": written,
        "prefix_own": written,
        **details,
    }


async def test_a_step_resumed_on_the_fleet_continues_the_cut_generation_instead_of_paying_twice(
    step, engine: EngineThread
) -> None:
    acts, store, inp = step
    whole = await ActivityEnvironment().run(acts.generate, _long_step(store, "whole", inp))
    assert whole.completion_tokens > 300

    cut = _cut_after(whole.message.content, 800, generated_beyond=9)
    resumed = await ActivityEnvironment().run(
        acts.generate, _long_step(store, "resumed", inp, attempt_base=100, inherited_progress=cut)
    )
    assert resumed.message.content == whole.message.content  # the same reply, the start of it written elsewhere
    assert resumed.attempt == 101
    assert (resumed.kept_tokens, resumed.lost_tokens) == (cut["prefix_tokens"], 9)
    # Only the rest was generated again: what the cut attempt wrote was prompt for the continuation.
    generated = engine.tally.snapshot()["by_task"]["resumed"]["completion_tokens"]
    assert generated == resumed.completion_tokens
    assert abs(resumed.completion_tokens + resumed.kept_tokens - whole.completion_tokens) <= 2
    booked = {(e.attempt, e.kind): e.completion_tokens for e in store.ledger.entries("resumed")}
    assert booked == {(1, "kept"): resumed.kept_tokens, (1, "lost"): 9, (101, "settled"): resumed.completion_tokens}
    assert store.ledger.totals("resumed").tokens == resumed.tokens_charged
    [call] = [e.data for e in store.events.read("resumed") if e.kind == "llm_call"]
    assert call["kept_tokens"] == resumed.kept_tokens and call["lost_tokens"] == 9
    # The continuation's max_tokens is what the cut text left of the step's answer, not a budget cut: a reply
    # that then ends by length is the step's own length, and must not wait for a raise it does not need.
    assert not resumed.budget_limited


async def test_a_prefix_is_continued_across_two_interruptions(step) -> None:
    acts, store, inp = step
    whole = await ActivityEnvironment().run(acts.generate, _long_step(store, "whole2", inp))
    text = whole.message.content
    first = _cut_after(text, 400, generated_beyond=0)
    # The second placement continued the first's 400 characters and wrote 300 more before its own cut.
    second = _cut_after(text, 700, generated_beyond=3, attempt=101, kept_before=first["prefix_tokens"])
    second["prefix_own"] = second["prefix_tokens"] - first["prefix_tokens"]
    second["generated"] = second["prefix_own"] + 3
    resumed = await ActivityEnvironment().run(
        acts.generate, _long_step(store, "twice", inp, attempt_base=200, inherited_progress=second)
    )
    assert resumed.message.content == text
    assert resumed.kept_tokens == second["prefix_tokens"] and resumed.lost_tokens == 3


async def test_a_prefix_is_not_continued_off_the_fleet_or_without_room_after_it(step) -> None:
    acts, store, inp = step
    whole = await ActivityEnvironment().run(acts.generate, _long_step(store, "whole3", inp))
    cut = _cut_after(whole.message.content, 800, generated_beyond=9)
    hosted = await ActivityEnvironment().run(
        acts.generate, _long_step(store, "hosted", inp, placement=None, attempt_base=100, inherited_progress=cut)
    )
    assert (hosted.kept_tokens, hosted.lost_tokens) == (0, cut["generated"])  # started over: all of it lost
    assert hosted.message.content == whole.message.content
    no_room = await ActivityEnvironment().run(
        acts.generate,
        _long_step(
            store, "no-room", inp, max_tokens=cut["prefix_tokens"] + 5, attempt_base=100, inherited_progress=cut
        ),
    )
    assert no_room.kept_tokens == 0 and no_room.lost_tokens == cut["generated"]


async def test_a_request_the_engine_refuses_is_not_retried(step) -> None:
    """Past the model's context window the engine answers 400 at once: a retry would be refused the same way."""
    from temporalio.exceptions import ApplicationError

    acts, store, inp = step
    with pytest.raises(ApplicationError) as refused:
        await ActivityEnvironment().run(
            acts.generate, inp.model_copy(update={"max_tokens": 200_000, "token_allowance": 1_000_000})
        )
    assert refused.value.type == "ModelRequestRejected" and refused.value.non_retryable
    assert "context length" in str(refused.value) and store.ledger.totals("t1").calls == 0
