"""How late a watching client gets each piece of an answer, over what the engine's own stream would give it.

Real parts: a simulated engine at its real pace (llama-3.1-8b: 0.15 s to the first token, 120 tokens/s) as its own
process, a Temporal dev server, the control worker and the API in this process, the API served by uvicorn on a
loopback port and read by the SDK over real HTTP (`TaskHandle.stream()`, the events SSE with deltas), and a node's
peer server with the writing route over the same board (the hop from a GPU node to the API). `--busy N` keeps N
more processes spinning on the CPU meanwhile (a busy machine).

Each run, in turn:
    engine    the engine's own stream, opened directly (`open_stream`, as the step opens it): time to its first text
    berth     a task writing one answer, followed by the SDK: the step's own engine stream as the activity reads it
              (the moment a direct reader gets each piece: the baseline of the same call), and each delta's arrival
              at the client; and the same step followed from the node's writing route
Reported: p50/p99 over runs of the first delta's delay at the client over the engine's first piece (the goal:
p50 <= 100 ms), over every piece too, for the SDK and for the node hop alone, and the engine's first-text time.

    python -m benchmarks.delta_latency [--runs 10] [--busy 1]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import uvicorn  # noqa: E402
from temporalio.contrib.pydantic import pydantic_data_converter  # noqa: E402
from temporalio.testing import WorkflowEnvironment  # noqa: E402

import activities.llm_step as llm_step  # noqa: E402
from activities.step.model_stream import StreamRequest, open_stream  # noqa: E402
from activities.step.writing_board import BOARD, Generation  # noqa: E402
from orchestrator.api import TemporalGateway  # noqa: E402
from orchestrator.api.writing_sources import SourcePiece, from_node  # noqa: E402
from orchestrator.catalogue import ModelCatalogue  # noqa: E402
from orchestrator.config import BerthConfig  # noqa: E402
from orchestrator.engines.serving import listening_socket  # noqa: E402
from orchestrator.node.peer_server import PeerServer  # noqa: E402
from orchestrator.node.peer_tickets import PeerTickets  # noqa: E402
from orchestrator.node.writing_route import writing_route  # noqa: E402
from orchestrator.server import create_app  # noqa: E402
from orchestrator.store import Store  # noqa: E402
from orchestrator.store.peers import WritingSource  # noqa: E402
from orchestrator.worker import build_worker  # noqa: E402
from sdk import Agent, Budget, Client, TokenDelta  # noqa: E402
from sdk.wire.identity import Role  # noqa: E402
from sdk.wire.step_call import ModelRoute  # noqa: E402
from sdk.wire.writing import writing_key  # noqa: E402

from ._results import write_results  # noqa: E402
from .step_overhead import _free_port, _wait  # noqa: E402

MODEL = "llama-3.1-8b"
# ~200 tokens: under 2 s of writing at the engine's pace, ~50 pieces (the simulated engine sends 4 tokens a piece).
TASK_INPUT = "berths\nlength: 200 tokens"
ANSWER_TOKENS = 256
NODE_SECRET = "bench-node"
GOAL_FIRST_DELTA_MS = 100.0


class Clock:
    """When the activity read each piece of each step's engine stream (the end offset it reached, perf_counter)."""

    def __init__(self) -> None:
        self.written: dict[tuple[str, int], list[tuple[int, float]]] = defaultdict(list)

    def install(self) -> None:
        original = Generation.write
        clock = self

        def write(generation: Generation, text: str) -> None:
            original(generation, text)
            if text:
                clock.written[(generation.task_id, generation.step)].append((generation.length, time.perf_counter()))

        Generation.write = write  # type: ignore[method-assign,assignment]

    def written_by(self, key: tuple[str, int], end: int) -> float:
        """When the piece that took the step's text to `end` characters or past it was read from the engine."""
        return next(t for reached, t in self.written[key] if reached >= end)


async def engine_first_text_s(route: ModelRoute) -> float:
    """The engine's own stream, opened directly: seconds to its first text."""
    request = StreamRequest(
        messages=[{"role": "system", "content": "Write a report."}, {"role": "user", "content": TASK_INPUT}],
        tools=None,
        max_tokens=ANSWER_TOKENS,
        headers={},
        continue_final_message=False,
    )
    started = time.perf_counter()
    stream = await open_stream(route, request)
    first: float | None = None
    try:
        async for delta in stream:
            if delta.text and first is None:
                first = time.perf_counter() - started
            if delta.usage is not None:
                break
    finally:
        await stream.aclose()
    assert first is not None
    return first


async def follow_sdk(client: Client, task_id: str) -> list[tuple[int, int, float]]:
    """(step, end offset, arrival) of each delta the SDK hands over."""
    arrivals = []
    async for event in client.task(task_id).stream():
        if isinstance(event, TokenDelta) and event.text:
            arrivals.append((event.step, event.offset + len(event.text), time.perf_counter()))
    return arrivals


async def follow_node(source: WritingSource, task_id: str) -> list[tuple[int, int, float]]:
    """(step, end offset, arrival) of each piece of the task's first written step, read from the node's route."""
    step = 1
    while BOARD.get(task_id, step) is None:
        await asyncio.sleep(0.001)
    arrivals = []
    async for item in from_node(source, task_id, step):
        if isinstance(item, SourcePiece):
            arrivals.append((step, item.offset + len(item.text), time.perf_counter()))
    return arrivals


@contextlib.contextmanager
def busy(processes: int) -> Iterator[None]:
    """`processes` interpreters spinning on the CPU (their own processes: a fork of this one would inherit the
    server's signal handlers and ignore SIGTERM)."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(processes)]
    try:
        yield
    finally:
        for p in spinners:
            p.kill()
            p.wait()


def _spread(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {"p50": statistics.median(ordered), "p99": ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]}


async def main(runs: int, busy_processes: int) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="berth-bench-deltas-"))
    port = _free_port()
    engine = subprocess.Popen(
        [sys.executable, "-m", "orchestrator.engines.simulated", "--port", str(port), "--latency-scale", "1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=str(Path(sys.executable).parent / "temporal"), data_converter=pydantic_data_converter
    )
    clock = Clock()
    clock.install()
    engine_s: list[float] = []
    sdk_first_ms: list[float] = []
    sdk_every_ms: list[float] = []
    node_every_ms: list[float] = []
    activity_first_s: list[float] = []
    try:
        await _wait(f"http://127.0.0.1:{port}/health")
        config = BerthConfig(
            data_dir=tmp, engine_url=f"http://127.0.0.1:{port}/v1", database_url=f"sqlite:///{tmp / 'berth.db'}"
        )
        store = Store.open(config.resolved_database_url)
        admin_key = store.keys.create(Role.admin).key
        queue = f"bench-{uuid.uuid4().hex[:8]}"
        app = create_app(config, store, TemporalGateway.from_client(env.client, task_queue=queue))
        sock = listening_socket("127.0.0.1", 0)
        server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
        serving = asyncio.create_task(server.serve(sockets=[sock]))
        tickets = PeerTickets("http://127.0.0.1:9", "bench-node", lambda: NODE_SECRET)
        node = PeerServer(_NoFiles(), tickets, routes=[writing_route("bench-node", lambda: NODE_SECRET, BOARD)])
        await node.start()
        source = WritingSource("bench-node", node.url, writing_key(NODE_SECRET))
        route = ModelCatalogue(config).route(MODEL, None)  # as the control worker's steps reach the engine
        opened: dict[str, float] = {}
        original_open = llm_step.open_stream

        async def timed_open(route: ModelRoute, request: StreamRequest):  # noqa: ANN202 — as open_stream
            opened[request.headers["X-Berth-Task"]] = time.perf_counter()
            return await original_open(route, request)

        llm_step.open_stream = timed_open
        try:
            async with build_worker(env.client, store, config, task_queue=queue):
                async with Client(f"http://127.0.0.1:{sock.getsockname()[1]}", api_key=admin_key) as client:
                    agent = Agent(f"bench-writer-{uuid.uuid4().hex[:6]}", MODEL, "Write a report.")
                    await client.register(agent)
                    await _one(client, agent, source)  # warm-up: imports, connections, the tokenizer
                    with busy(busy_processes):
                        for _ in range(runs):
                            engine_s.append(await engine_first_text_s(route))
                            task_id, sdk, on_node = await _one(client, agent, source)
                            key = (task_id, sdk[0][0])
                            first_read = clock.written[key][0][1]
                            activity_first_s.append(first_read - opened[task_id])
                            sdk_first_ms.append((sdk[0][2] - first_read) * 1000)
                            sdk_every_ms += [(t - clock.written_by(key, end)) * 1000 for _, end, t in sdk]
                            node_every_ms += [(t - clock.written_by(key, end)) * 1000 for _, end, t in on_node]
        finally:
            llm_step.open_stream = original_open
            await node.stop()
            await tickets.close()
            server.should_exit = True
            await serving
            sock.close()
            store.close()
    finally:
        await env.shutdown()
        engine.terminate()
        engine.wait(10)

    first = _spread(sdk_first_ms)
    every, hop = _spread(sdk_every_ms), _spread(node_every_ms)
    engine_ms, step_ms = _spread([s * 1000 for s in engine_s]), _spread([s * 1000 for s in activity_first_s])
    figures: dict[str, Any] = {
        "runs": runs,
        "busy_processes": busy_processes,
        "model": MODEL,
        "engine_first_text_ms": engine_ms,
        "step_engine_first_text_ms": step_ms,
        "first_delta_added_ms": first,
        "every_delta_added_ms": every,
        "node_hop_added_ms": hop,
        "deltas_per_run": len(sdk_every_ms) / runs,
        "goal_first_delta_added_ms": GOAL_FIRST_DELTA_MS,
        "goal_met": first["p50"] <= GOAL_FIRST_DELTA_MS,
    }
    print(
        f"engine's own stream: first text after {engine_ms['p50']:.0f} ms (p50), as the step reads it"
        f" {step_ms['p50']:.0f} ms\n"
        f"first delta at the SDK: +{first['p50']:.1f} ms over the engine's first piece (p50; p99 +{first['p99']:.1f}"
        f" ms), goal <= {GOAL_FIRST_DELTA_MS:.0f} ms: {'met' if figures['goal_met'] else 'missed'}\n"
        f"every delta: +{every['p50']:.1f} ms p50, +{every['p99']:.1f} ms p99; the node's writing route alone:"
        f" +{hop['p50']:.1f} ms p50, +{hop['p99']:.1f} ms p99 ({figures['deltas_per_run']:.0f} deltas a run)"
    )
    path = write_results("delta_latency", figures)
    print(f"figures written to {path}")
    return figures


async def _one(client: Client, agent: Agent, source: WritingSource) -> tuple[str, list, list]:
    task = await client.submit(agent, TASK_INPUT, budget=Budget(tokens=20_000))
    sdk, on_node = await asyncio.gather(follow_sdk(client, task.task_id), follow_node(source, task.task_id))
    return task.task_id, sdk, on_node


class _NoFiles:
    def verified_path(self, sha256: str) -> Path | None:
        return None


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--busy", type=int, default=1, help="processes spinning on the CPU meanwhile")
    args = parser.parse_args()
    asyncio.run(main(args.runs, args.busy))
