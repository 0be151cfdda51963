"""Tokens as they are written: the deltas a client gets for a step add up to exactly the step's text, for a
whole answer, one cut by a (simulated) preemption and started over, and one cut by the task's cancellation.

Real parts throughout: the app served by uvicorn on a loopback port, the SDK over real HTTP, the control
worker on a real Temporal dev server, and the simulated engine writing at a real pace over HTTP. The tests
assert order and content, never timings.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import uvicorn
from api_helpers import unique
from temporalio.client import Client as TemporalClient

from activities.step.writing_board import BOARD
from orchestrator.api import TemporalGateway
from orchestrator.config import BerthConfig
from orchestrator.engines.serving import listening_socket
from orchestrator.engines.simulated import EngineThread
from orchestrator.server import create_app
from orchestrator.store import Store
from orchestrator.worker import build_worker
from sdk import Agent, Budget, Client, StepFinished, TaskStatus, TextReset, TokenDelta
from sdk.wire.identity import Role

# About 3 s of writing at llama-3.1-8b's simulated 120 tokens/s: long enough to cut into.
LONG = "berths\nlength: 400 tokens"


@dataclass
class Served:
    client: Client
    store: Store


@pytest.fixture
async def served(temporal_client: TemporalClient, tmp_path: Path) -> AsyncIterator[Served]:
    """The app on a loopback port with a real worker on its own control queue, over an engine writing at pace."""
    with EngineThread(latency_scale=1.0) as engine:
        config = BerthConfig(
            data_dir=tmp_path, engine_url=engine.base_url, database_url=f"sqlite:///{tmp_path}/berth.db"
        )
        store = Store.open(config.resolved_database_url)
        admin_key = store.keys.create(Role.admin).key
        queue = f"control-{uuid.uuid4().hex[:8]}"
        app = create_app(config, store, TemporalGateway.from_client(temporal_client, task_queue=queue))
        sock = listening_socket("127.0.0.1", 0)
        server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
        serving = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started:
            await asyncio.sleep(0.01)
        try:
            async with build_worker(temporal_client, store, config, task_queue=queue):
                url = f"http://127.0.0.1:{sock.getsockname()[1]}"
                async with Client(url, api_key=admin_key) as client:
                    yield Served(client, store)
        finally:
            server.should_exit = True
            await serving
            sock.close()
            store.close()


@dataclass
class Received:
    """What a client following `stream()` holds of each step, applying deltas and resets at their offsets."""

    texts: dict[int, str] = field(default_factory=dict)
    at_step_finished: dict[int, str] = field(default_factory=dict)
    resets: int = 0

    def apply(self, event: object) -> None:
        if isinstance(event, TokenDelta):
            held = self.texts.get(event.step, "")
            assert event.offset <= len(held), "a delta never leaves a gap"
            self.texts[event.step] = held[: event.offset] + event.text
        elif isinstance(event, TextReset):
            self.resets += 1
            self.texts[event.step] = self.texts.get(event.step, "")[: event.offset]
        elif isinstance(event, StepFinished):
            self.at_step_finished[event.step] = self.texts.get(event.step, "")


def stored_step_texts(store: Store, task_id: str) -> dict[int, str]:
    """Each stored step's text: the content of the assistant message its checkpoint added."""
    texts: dict[int, str] = {}
    summaries = store.checkpoints.list(task_id)
    for before, summary in zip(summaries, summaries[1:], strict=False):
        added = store.checkpoints.read(summary.id).messages[before.message_count :]
        assistant = [m for m in added if m.role == "assistant"]
        if assistant:
            texts[summary.step] = assistant[0].content or ""
    return texts


async def follow(client: Client, task_id: str, on_first_delta: object = None) -> Received:
    received = Received()
    acted = False
    async for event in client.task(task_id).stream():
        received.apply(event)
        if isinstance(event, TokenDelta) and not acted and on_first_delta is not None:
            acted = True
            await on_first_delta()  # type: ignore[operator]
    return received


async def register(client: Client) -> str:
    agent = Agent(unique("deltas"), "llama-3.1-8b", "Write a report.")
    await client.register(agent)
    return agent.name


async def test_a_whole_answer_arrives_as_deltas_that_add_up_to_the_stored_text(served: Served) -> None:
    task = await served.client.submit(await register(served.client), LONG, budget=Budget(tokens=50_000))
    polled: list[str] = []

    async def poll() -> None:  # a caller that polls reads the text so far, whole
        polled.append((await task.writing()).text)

    received = await follow(served.client, task.task_id, poll)

    stored = stored_step_texts(served.store, task.task_id)
    assert stored and all(stored.values())
    assert received.at_step_finished == stored
    assert received.texts == stored
    state = await task.status()
    assert state.status == TaskStatus.completed and received.texts[state.step] == state.result
    assert polled[0] and state.result.startswith(polled[0])


async def test_a_preempted_generation_started_over_still_adds_up_to_the_stored_text(served: Served) -> None:
    task = await served.client.submit(await register(served.client), LONG, budget=Budget(tokens=50_000))

    async def preempt() -> None:
        await task.simulate_preemption()

    received = await follow(served.client, task.task_id, preempt)

    stored = stored_step_texts(served.store, task.task_id)
    assert (await task.status()).status == TaskStatus.completed
    assert received.at_step_finished == stored
    assert received.texts == stored


async def test_a_cancelled_generation_leaves_the_client_with_what_it_wrote(served: Served) -> None:
    task = await served.client.submit(await register(served.client), LONG, budget=Budget(tokens=50_000))

    async def cancel() -> None:
        await task.cancel("enough")

    received = await follow(served.client, task.task_id, cancel)

    state = await task.status()
    assert state.status == TaskStatus.cancelled
    step = state.step + 1
    cut = BOARD.get(task.task_id, step)
    assert cut is not None and cut.ending == "cut"
    written = cut.after(0).text
    assert written and received.texts == {step: written}
