"""The API's side of a node's step bookkeeping, in-process: SQL statements, transactions and CPU per route call.

The real app over a real SQLite file (no HTTP, no Temporal: the routes' coroutines are awaited directly, the
store work still runs in the API's thread pool as it does under uvicorn). N tasks of one agent with a tool,
each with its first checkpoint and a lease for its step 1 on one admitted node; for each task, in order:
`prepare` (the conversation read, the prompt counted, the reservation written), `interrupted` (one lost
attempt booked) and `settle` (the call booked and announced), so every call reads a task it has not read
before, as a node's next step does in the load run. One task is run first, untimed, to import litellm and
load the tokenizer.

Statements are counted at the DBAPI cursor (`before_cursor_execute`); transactions as connections taken from
the pool (each store call outside `Store.transaction` takes one and ends its transaction on it), and commits
apart. CPU is this process's (time.process_time) around each call. The figures are kept under --label in
benchmarks/results/step_routes.json.

    python -m benchmarks.step_routes --label after [--tasks 300]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx
from sqlalchemy import event

from orchestrator.api import TemporalGateway
from orchestrator.api import steps as routes
from orchestrator.config import BerthConfig
from orchestrator.server import create_app
from orchestrator.store import CallReservation, LeaseRecord, Store
from sdk import AgentSpec, Message, Spend, TaskState, TaskStatus, ToolSpec
from sdk.wire.lease import StepLimits, StepPlacement
from sdk.wire.step_books import BookInterruptedRequest, DeadAttemptBody, PrepareStepRequest, SettleStepRequest
from tests.conftest import free_port

from ._results import write_labelled_run

NAME = "step_routes"
TASKS = 300
NODE = "gpu-routes"
MODEL = "llama-3.2-1b"
ROUTES = ("prepare", "interrupted", "settle")


class Counts:
    """Statements, connections taken and commits on one engine, charged to the route running now."""

    def __init__(self, store: Store) -> None:
        self.route: str | None = None
        self.statements: Counter = Counter()
        self.connections: Counter = Counter()
        self.commits: Counter = Counter()
        self.cpu_s: Counter = Counter()
        event.listen(store.engine, "before_cursor_execute", lambda *_: self._count(self.statements))
        event.listen(store.engine.pool, "checkout", lambda *_: self._count(self.connections))
        event.listen(store.engine, "commit", lambda *_: self._count(self.commits))

    def _count(self, counter: Counter) -> None:
        if self.route is not None:
            counter[self.route] += 1

    async def timed(self, route: str, call: Awaitable[object]) -> None:
        self.route = route
        started = time.process_time()
        await call
        self.cpu_s[route] += time.process_time() - started
        self.route = None


async def register_node(app: object, store: Store) -> str:
    token = store.node_admission.mint(NODE, 600).join_token
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://berth") as http:
        joined = await http.post(
            "/v1/nodes/register",
            json={
                "node_id": NODE,
                "join_token": token,
                "datacenter": "dc1",
                "zone": "z1",
                "gpus": [{"index": 0, "uuid": "GPU-0", "type_name": "H100-80GB", "memory_total_mib": 81559}],
            },
        )
    joined.raise_for_status()
    return joined.json()["node_secret"]


def leased_tasks(store: Store, count: int) -> list[tuple[str, object]]:
    """`count` running tasks of one agent, each with its root checkpoint and the lease of its step 1."""
    agent = store.agents.register(
        AgentSpec(
            name="writer",
            model=MODEL,
            instructions="Write briefly.",
            tools=[ToolSpec(name="lookup", description="Look a word up.")],
        )
    )
    tasks = []
    for i in range(count):
        task_id = f"t-{i}"
        store.tasks.create(
            task_id,
            "{}",
            TaskState(
                task_id=task_id,
                agent=agent.name,
                agent_version=agent.version,
                model=MODEL,
                tenant="default",
                status=TaskStatus.running,
                max_steps=5,
                spend=Spend(token_limit=50_000),
            ),
        )
        root = store.checkpoints.write_root(task_id, [Message(role="user", content=f"What is berth {i}?")], {})
        store.leases.add(
            LeaseRecord(
                lease_id=f"lease-{i}",
                task_id=task_id,
                step=1,
                model=MODEL,
                node_id=NODE,
                replica_id="r-1",
                tokens=500,
                tenant="default",
                limits=StepLimits(max_tokens=500, token_allowance=4000, first_attempt=1, last_attempt=100),
            )
        )
        # Attempt 1 started and died (the timed calls are attempt 2's: it books attempt 1's tokens as lost).
        store.leases.reserve_call(f"lease-{i}", CallReservation(prompt_tokens=20, max_tokens=500), 1)
        tasks.append((f"lease-{i}", root))
    return tasks


def calls(svc: object, secret: str, lease_id: str, root: object) -> list[tuple[str, Callable[[], Awaitable[object]]]]:
    placement = StepPlacement(
        lease_id=lease_id,
        node_id=NODE,
        replica_id="r-1",
        gpu_indexes=[0],
        gpu_type="H100-80GB",
        tier="warm",
        decided_by="queue",
        queue_wait_s=0.2,
    )
    return [
        (
            "prepare",
            lambda: routes.prepare(
                NODE, PrepareStepRequest(lease_id=lease_id, attempt=2, checkpoint=root), svc, secret
            ),
        ),
        (
            "interrupted",
            lambda: routes.book_interrupted(
                NODE,
                BookInterruptedRequest(lease_id=lease_id, entries=[DeadAttemptBody(attempt=1, kind="lost", tokens=5)]),
                svc,
                secret,
            ),
        ),
        (
            "settle",
            lambda: routes.settle(
                NODE,
                SettleStepRequest(
                    lease_id=lease_id,
                    attempt=2,
                    prompt_tokens=30,
                    completion_tokens=12,
                    continued_tokens=0,
                    ttft_s=0.05,
                    duration_s=0.2,
                    response_id="chatcmpl-1",
                    finish_reason="stop",
                    tool_calls=[],
                    placement=placement,
                ),
                svc,
                secret,
            ),
        ),
    ]


async def measure(tasks: int) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="berth-bench-routes-"))
    config = BerthConfig(data_dir=tmp, database_url=f"sqlite:///{tmp}/berth.db")
    store = Store.open(config.resolved_database_url)
    try:
        app = create_app(config, store, TemporalGateway(f"127.0.0.1:{free_port()}"))  # these routes never reach it
        svc = app.state.services
        secret = await register_node(app, store)
        leased = leased_tasks(store, tasks + 1)
        for _, call in calls(svc, secret, *leased[-1]):  # untimed: litellm's import and its tokenizer's load
            await call()
        counts = Counts(store)
        for lease_id, root in leased[:-1]:
            for route, call in calls(svc, secret, lease_id, root):
                await counts.timed(route, call())
    finally:
        store.close()
    per_call = {
        r: {
            "statements": round(counts.statements[r] / tasks, 2),
            "connections": round(counts.connections[r] / tasks, 2),
            "commits": round(counts.commits[r] / tasks, 2),
            "cpu_ms": round(1000 * counts.cpu_s[r] / tasks, 2),
        }
        for r in ROUTES
    }
    return {
        "tasks": tasks,
        "per_call": per_call,
        "prepare_and_settle_cpu_ms": round(per_call["prepare"]["cpu_ms"] + per_call["settle"]["cpu_ms"], 2),
    }


def main() -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--label", required=True, help="the run's name in the results file (before, after, ...)")
    parser.add_argument("--tasks", type=int, default=TASKS, help=f"tasks, one step each (default {TASKS})")
    parser.add_argument("--note", default="", help="what this run is of")
    args = parser.parse_args()
    figures = {**asyncio.run(measure(args.tasks)), "note": args.note}
    print(json.dumps(figures, indent=1))
    print(f"figures written to {write_labelled_run(NAME, args.label, figures)}")
    return figures


if __name__ == "__main__":
    main()
