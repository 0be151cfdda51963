"""A node stopping just as its engine writes a reply's last chunk: the engine journals the request as completed,
the node never read that chunk, and the books still balance under the system tests' own check.

This is the race `test_stack.py::test_whole_stack_restarted_mid_task_resumes_it` once lost on a busy machine
(12 engine requests, 11 calls, 299 tokens generated, 298 booked): the step's reply was a 10-token tool call
whose last piece is one token; the engine had sent that piece and journaled the request completed (it tallies
before its last write, openai_face.py `_stream`) when the stopping node cut the generation with 9 tokens read. After the
restart the step started over on a fresh engine (which cannot replay a reply the old one finished), booking the
9 as lost and its new reply as settled: every token that reached Berth is booked, the engine counts one more.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

import activities.llm_step as llm_step
from activities.llm_step import LlmStepActivities
from activities.step.model_stream import ModelStream
from activities.step.store_books import StoreStepBooks
from activities.step.tokens import encode
from orchestrator.catalogue import ModelCatalogue
from orchestrator.config import BerthConfig
from orchestrator.engines.simulated import EngineThread
from orchestrator.engines.simulated.app import CHUNK_TOKENS
from orchestrator.node.generation import NodeGeneration
from orchestrator.store import Store
from sdk import Message
from sdk.wire.contracts import NODE_STOPPING, LlmStepInput
from sdk.wire.streamed_reply import StreamDelta, delta_text
from tests.system.books import check_nothing_hidden

TASK = "t-last-chunk"


@pytest.fixture
def engines() -> Iterator[tuple[EngineThread, EngineThread]]:
    """The replica the cut attempt ran on, and the fresh one the step runs on after the restart."""
    with EngineThread(latency_scale=0) as before, EngineThread(latency_scale=0) as after:
        yield before, after


def _acts(store: Store, engine: EngineThread) -> LlmStepActivities:
    return LlmStepActivities(
        StoreStepBooks(store.checkpoints, store.tasks, store.events, store.ledger),
        ModelCatalogue(BerthConfig(engine_url=engine.base_url)),
    )


class _LastChunkUnread:
    """The node's side of the race: it reads the reply until the engine has written all of it, but never
    gets to the last piece (its event loop was elsewhere when the stop came)."""

    def __init__(self) -> None:
        self.held: StreamDelta | None = None
        self.engine_done = asyncio.Event()

    def wrap(self, stream: ModelStream) -> ModelStream:
        async def deltas() -> AsyncIterator[StreamDelta]:
            held: StreamDelta | None = None
            async for delta in stream:
                if delta.finish_reason is not None or delta.usage is not None:
                    # The engine wrote the last piece and journaled the request; `held` stays unread.
                    self.held = held
                    self.engine_done.set()
                    await asyncio.Event().wait()  # until the stop cuts the generation
                if held is not None:
                    yield held
                held = delta

        return ModelStream(deltas(), stream.aclose)


async def _cut_at_the_last_chunk(
    store: Store, engine: EngineThread, inp: LlmStepInput, monkeypatch: pytest.MonkeyPatch
) -> tuple[dict[str, Any], int]:
    """Run the step's first attempt as a node does, and stop the node once the engine has finished the reply;
    the cut attempt's progress and the tokens of the piece it never read."""
    node = _LastChunkUnread()
    opened = llm_step.open_stream

    async def open_stream(route: Any, request: Any) -> ModelStream:
        return node.wrap(await opened(route, request))

    monkeypatch.setattr(llm_step, "open_stream", open_stream)
    env = ActivityEnvironment()
    generation = NodeGeneration(_acts(store, engine), SimpleNamespace(get=lambda _: None))  # type: ignore[arg-type]
    running = asyncio.ensure_future(env.run(generation.generate, inp))
    await asyncio.wait_for(node.engine_done.wait(), 30)
    env.worker_shutdown()  # the node's SIGTERM
    with pytest.raises(ApplicationError) as cut:
        await running
    monkeypatch.setattr(llm_step, "open_stream", opened)
    assert cut.value.type == NODE_STOPPING
    assert node.held is not None
    unread = len(encode(delta_text(node.held)[0]))
    return cut.value.details[0].model_dump(), unread


async def test_a_reply_the_engine_finished_but_the_stopping_node_never_read_to_the_end_balances(
    engines: tuple[EngineThread, EngineThread], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before, after = engines
    store = Store.open(f"sqlite:///{tmp_path / 'b.db'}")
    root = store.checkpoints.write_root(TASK, [Message(role="user", content="Explain KV caches")], {})
    inp = LlmStepInput(
        task_id=TASK, step=1, checkpoint=root, model="llama-3.2-1b", max_tokens=200, token_allowance=10_000
    )

    progress, unread = await _cut_at_the_last_chunk(store, before, inp, monkeypatch)
    journaled = before.tally.snapshot()["by_task"][TASK]
    assert (journaled["requests"], journaled["aborted_requests"]) == (1, 0)  # completed, though never read to the end
    assert progress["generated"] + unread == journaled["completion_tokens"]
    assert 0 < unread <= CHUNK_TOKENS

    # After the restart the step's next attempt runs on a fresh engine: the dead attempt's tokens are lost.
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, attempt=2, heartbeat_details=[progress])
    again = await env.run(_acts(store, after).generate, inp)
    assert again.lost_tokens == progress["generated"]

    ledger = dataclasses.asdict(store.ledger.totals(TASK))
    engine = _sum(before.tally.snapshot()["by_task"][TASK], after.tally.snapshot()["by_task"][TASK])
    assert (ledger["calls"], engine["requests"]) == (1, 2)
    booked = ledger["completion_tokens"] + ledger["lost_tokens"] + ledger["kept_tokens"]
    assert engine["completion_tokens"] - booked == unread  # the one piece on the wire, nothing else
    check_nothing_hidden(ledger, engine)


def test_the_check_still_catches_tokens_that_reached_berth_and_were_not_booked() -> None:
    """The allowance is one chunk per request no call settled, not a licence: a cut whose read tokens went
    unbooked, or a settled call short of the engine's usage, still fails."""
    engine = {
        "requests": 12,
        "prompt_tokens": 5000,
        "completion_tokens": 299,
        "aborted_requests": 0,
        "aborted_prompt_tokens": 0,
        "aborted_completion_tokens": 0,
    }
    ledger = {"calls": 11, "prompt_tokens": 4500, "completion_tokens": 289, "lost_tokens": 9, "kept_tokens": 0}
    check_nothing_hidden(ledger, engine)  # the reported run: the cut call's last 1-token piece was never read
    with pytest.raises(AssertionError):
        check_nothing_hidden({**ledger, "lost_tokens": 0}, engine)  # the cut call's 9 read tokens never booked
    with pytest.raises(AssertionError):
        check_nothing_hidden({**ledger, "calls": 12}, engine)  # every request settled: nothing was on the wire
    with pytest.raises(AssertionError):
        check_nothing_hidden({**ledger, "calls": 10}, engine)  # a settled call the engine never completed


def _sum(*counts: dict[str, int]) -> dict[str, int]:
    return {key: sum(c.get(key, 0) for c in counts) for key in counts[0]}
