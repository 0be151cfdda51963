"""`step_deltas.step_text` across a step's attempts: a cut attempt, then one that continues the cut text but
writes otherwise, read from this process's writing board over a real store. What it yields, applied at its
offsets, is the last attempt's text, with a reset where that attempt departs from what was sent."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from api_helpers import put_task
from starlette.concurrency import run_in_threadpool

from activities.step.writing_board import BOARD
from orchestrator.api.step_deltas import Delta, Reset, step_text
from orchestrator.store import Store
from sdk import AgentSpec


class NoHeartbeats:
    async def writing(self, task_id: str) -> None:
        return None


def services(store: Store) -> SimpleNamespace:
    """What step_text reads: the store (in the thread pool, as the API reads it) and Temporal's heartbeats."""
    return SimpleNamespace(store=store, temporal=NoHeartbeats(), db=run_in_threadpool)


async def test_a_takeover_that_departs_from_what_was_sent_resets_there_and_goes_on(
    store: Store, agent: AgentSpec
) -> None:
    task = put_task(store, agent)
    changes: list[Delta | Reset] = []

    async def follow() -> None:
        async for change in step_text(services(store), task.task_id, 1):  # type: ignore[arg-type]
            changes.append(change)

    following = asyncio.create_task(follow())
    await asyncio.sleep(0.05)  # the reader comes before the generation starts
    first = BOARD.start(task.task_id, 1, attempt=1, continued="")
    for piece in ["The answer", " is", " forty"]:
        first.write(piece)
        await asyncio.sleep(0.01)
    first.end("cut")
    await asyncio.sleep(0.05)
    second = BOARD.start(task.task_id, 1, attempt=2, continued="The answer")  # its last heartbeat's text
    second.write(" was six")
    second.end("finished")
    await asyncio.wait_for(following, 10)

    text = ""
    for change in changes:
        text = text[: change.offset] + change.text if isinstance(change, Delta) else text[: change.offset]
    assert text == "The answer was six"
    assert Reset(11) in changes
    assert "".join(c.text for c in changes[: changes.index(Reset(11))] if isinstance(c, Delta)) == "The answer is forty"


async def test_a_caller_resuming_gets_only_what_lies_past_what_it_holds(store: Store, agent: AgentSpec) -> None:
    task = put_task(store, agent)
    generation = BOARD.start(task.task_id, 1, attempt=1, continued="")
    generation.write("Berth runs agents.")
    generation.end("finished")
    changes = [c async for c in step_text(services(store), task.task_id, 1, after=6)]  # type: ignore[arg-type]
    assert changes == [Delta(6, "runs agents.")]
