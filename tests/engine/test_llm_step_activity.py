"""The LLM step activity against a real engine: reservation, shortfall, and a retried attempt
that books what its dead predecessor generated as lost tokens, paid from the same allowance."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.testing import ActivityEnvironment

from activities.llm_step import LlmStepActivities
from activities.step_books import StoreStepBooks
from orchestrator.catalogue import ModelCatalogue
from orchestrator.config import BerthConfig
from orchestrator.engines.simulated import EngineThread
from orchestrator.store import Store
from sdk import Message
from sdk.contracts import LlmStepInput


@pytest.fixture(scope="module")
def engine() -> Iterator[EngineThread]:
    with EngineThread(latency_scale=0) as e:
        yield e


@pytest.fixture
def step(engine: EngineThread, tmp_path: Path) -> tuple[LlmStepActivities, Store, LlmStepInput]:
    store = Store.open(f"sqlite:///{tmp_path / 'b.db'}")
    root = store.checkpoints.write_root("t1", [Message(role="user", content="Explain KV caches")], {})
    acts = LlmStepActivities(StoreStepBooks(store.checkpoints, store.tasks, store.events, store.ledger),
                             ModelCatalogue(BerthConfig(engine_url=engine.base_url)))
    inp = LlmStepInput(task_id="t1", step=1, checkpoint=root, model="llama-3.2-1b", max_tokens=200,
                       token_allowance=10_000)
    return acts, store, inp


async def test_a_call_books_exactly_what_the_engine_reports(step, engine: EngineThread) -> None:
    acts, store, inp = step
    result = await ActivityEnvironment().run(acts.generate, inp)
    usage = engine.tally.snapshot()["by_task"]["t1"]
    assert (result.prompt_tokens, result.completion_tokens) == (usage["prompt_tokens"], usage["completion_tokens"])
    totals = store.ledger.totals("t1")
    assert (totals.prompt_tokens, totals.completion_tokens, totals.calls) == (result.prompt_tokens,
                                                                             result.completion_tokens, 1)
    assert result.cost_usd > 0 and result.message.content


async def test_an_allowance_too_small_for_the_prompt_is_a_shortfall_not_a_call(step, engine: EngineThread) -> None:
    acts, store, inp = step
    before = engine.tally.snapshot()["total"]["requests"]
    result = await ActivityEnvironment().run(acts.generate, inp.model_copy(update={"token_allowance": 20}))
    assert result.shortfall_tokens and result.shortfall_tokens > 0 and result.message is None
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
    env.info = dataclasses.replace(env.info, attempt=3,
                                   heartbeat_details=[{"attempt": 2, "generated": 40, "lost_before": 25}])
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
    body = {"model": "llama-3.2-1b", "messages": [{"role": "user", "content": "Explain KV caches"}],
            "max_tokens": 200}
    headers = {"Idempotency-Key": "t-replay/1", "X-Berth-Task": "t-replay"}
    first = httpx.post(f"{engine.base_url}/chat/completions", json=body, headers=headers).json()

    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, attempt=2, heartbeat_details=[
        {"attempt": 1, "generated": 12, "response_id": first["id"], "lost_before": 0, "unresolved": []}])
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
        first.prompt_tokens, first.completion_tokens, 0)
    assert [(e.attempt, e.kind) for e in store.ledger.entries("t-booked")] == [(1, "settled")]
    assert engine.tally.snapshot()["by_task"]["t-booked"]["requests"] == 1


async def test_a_booked_reply_the_engine_cannot_replay_is_charged_not_hidden(step) -> None:
    from activities.ports import LedgerEntry

    acts, store, inp = step
    inp = inp.model_copy(update={"task_id": "t-gone"})
    store.checkpoints.write_root("t-gone", [Message(role="user", content="Explain KV caches")], {})
    inp = inp.model_copy(update={"checkpoint": store.checkpoints.latest("t-gone")})
    store.ledger.record(LedgerEntry("t-gone", 1, 1, "llama-3.2-1b", 30, 20, 0.001, 0.1, 0.2, "elsewhere",
                                    response_id="chatcmpl-from-an-engine-that-forgot"))
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, attempt=2)
    result = await env.run(acts.generate, inp)
    assert result.lost_tokens == 50  # the earlier booked reply: real spend the workflow never saw
    assert result.tokens_charged == 50 + result.prompt_tokens + result.completion_tokens
    totals = store.ledger.totals("t-gone")
    assert totals.prompt_tokens + totals.completion_tokens + totals.lost_tokens == result.tokens_charged


async def test_a_leased_step_records_where_it_ran(step) -> None:
    from sdk._lease import StepPlacement

    acts, store, inp = step
    placement = StepPlacement(node_id="gpu-a", replica_id="r-7", gpu_indexes=[0, 1], gpu_type="H100-80GB",
                              tier="warm", decided_by="queue", queue_wait_s=0.4, load_s=0.0)
    result = await ActivityEnvironment().run(acts.generate, inp.model_copy(update={"placement": placement}))
    assert result.placement == placement
    [call] = [e for e in store.events.read("t1") if e.kind == "llm_call"]
    assert {k: call.data[k] for k in ("node_id", "replica_id", "gpu_indexes", "gpu_type", "tier", "decided_by",
                                      "queue_wait_s", "load_s")} == placement.model_dump()
    assert call.data["completion_tokens"] == result.completion_tokens

    short = await ActivityEnvironment().run(acts.generate, inp.model_copy(update={"placement": placement,
                                                                                  "token_allowance": 20}))
    assert short.shortfall_tokens and short.placement == placement
