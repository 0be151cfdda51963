"""The demo workload: six tasks that show Berth's contract, followed live in the terminal.

- a tool-using research task;
- a coordinator that spawns two research sub-agents with slices of its budget;
- a research task whose budget is too small: it stops in `awaiting_budget`, the demo tops it
  up (as an operator would with `berth tasks raise-budget`) and it finishes;
- on a fleet, a research task on a second model whose weights the demo prewarmed first
  (`berth models prewarm`), so its replica loads from disk instead of origin;
- on a fleet with a CPU node, the real model (SmolLM2-135M through llama.cpp) answers a question in its own
  words, once llama.cpp is installed;
- on a fleet, a batch `writer` task that runs on the spot node until the demo reclaims that
  node (`berth nodes preempt`, 5 s notice) while it writes its long report: the generation
  stops, hands over its text, and the step goes on from that text on another node.

It ends with where each step ran and why (orchestrator/demo/placements.py).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Protocol

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table

from sdk import BerthError, Budget, Client, ScalingPolicy, TaskHandle, TaskState, TaskStatus
from sdk.wire.lease import ServiceClass

from ..config import BerthConfig
from .placements import interruption_rows, interruptions_table, placements_table, step_rows

DEMO_TASKS = [
    ("research", "H100 memory bandwidth; A100 memory bandwidth; decode speed for an 8b model", 20_000),
    (
        "coordinator",
        "Should we serve our 8B model on spot GPUs?\n"
        "delegate to research: spot GPU pricing and preemption (budget 6000)\n"
        "delegate to research: 8b model memory on l4 and h100 (budget 6000)",
        40_000,
    ),
    ("research", "kv cache size for 8b; 70b memory needs; spot GPU pricing", 700),
]
TOP_UP_TOKENS = 10_000
PREWARMED = ("research", "qwen2.5-7b", "east", "H100 memory for a 7b model; decode speed for a 7b model", 20_000)
PREWARM_WAIT_S = 60.0
# A batch task prefers spot capacity; once its tool steps are done there and it writes its long
# answer, the demo reclaims that spot node (as a cloud would, with a short notice): the answer's
# generation stops, hands over its text, and goes on from it on another node.
ON_SPOT = (
    "writer",
    "llama-3.2-1b",
    "spot preemption; kv cache size for 8b; decode speed for an 8b model\nlength: 2400 tokens",
    20_000,
)
PREEMPT_AFTER_STEP = 3
PREEMPT_NOTICE_S = 5.0
# While the demo runs, the spot task's model keeps two replicas (the scaler spreads them over two
# nodes), so the report resumes on a warm replica within a second instead of waiting for a load.
SPOT_MODEL_REPLICAS = 2
# The real model: SmolLM2-135M on this machine's CPU through llama.cpp; its answer is the model's own text. Its
# node joins once llama.cpp is installed (built in the background on a machine's first `make up`), and the demo
# puts the question then, waiting for the build for up to REAL_MODEL_WAIT_S.
REAL_MODEL = ("ask", "smollm2-135m", "What is the capital of France?", 2_000)
REAL_MODEL_WAIT_S = 45 * 60.0


class _Stop(Protocol):
    requested: bool


def run_demo(
    config: BerthConfig,
    tick: Callable[[], None],
    stop: _Stop,
    nodes: int = 0,
    api_key: str | None = None,
    real_model: bool = False,
) -> list[TaskState]:
    """Run the demo workload; `nodes` is how many GPU nodes the stack started (0: no fleet), `real_model` whether
    a node that serves the real model is to join (now or once llama.cpp is installed)."""
    return asyncio.run(_demo(config, tick, stop, nodes, api_key, real_model))


async def _demo(
    config: BerthConfig, tick: Callable[[], None], stop: _Stop, nodes: int, api_key: str | None, real_model: bool
) -> list[TaskState]:
    console = Console()
    client = Client(config.resolved_api_url, api_key=api_key)
    await _wait_for_agents(client, {"research", "coordinator", "writer"})
    await _wait_for_nodes(client, nodes)
    # The demo's task ids share a stamp (tables print them without it); a chosen id is its tenant's, `default:…`.
    prefix = f"default:demo-{time.strftime('%H%M%S')}-"
    handles = [
        await _submit(client, agent, text, tokens, f"{prefix}{i}")
        for i, (agent, text, tokens) in enumerate(DEMO_TASKS, 1)
    ]
    spot_policy: ScalingPolicy | None = None
    if nodes:
        agent, model, datacenter, text, tokens = PREWARMED
        await _prewarm(client, console, model, datacenter)
        handles.append(await _submit(client, agent, text, tokens, f"{prefix}{len(handles) + 1}", model=model))
        agent, model, text, tokens = ON_SPOT
        spot_policy = (await client.model(model)).policy
        await client.set_policy(
            model,
            spot_policy.model_copy(
                update={
                    "min_replicas": SPOT_MODEL_REPLICAS,
                    "max_replicas": max(spot_policy.max_replicas, SPOT_MODEL_REPLICAS),
                }
            ),
        )
        handles.append(
            await _submit(
                client, agent, text, tokens, f"{prefix}{len(handles) + 1}", model=model, service_class="batch"
            )
        )
    spot_task = handles[-1].task_id if nodes else None
    preempted: str | None = None
    topped_up: set[str] = set()
    states: list[TaskState] = []
    real = _RealModelTask(f"{prefix}{len(handles) + 1}") if real_model else None
    with Live(console=console, refresh_per_second=4) as live:
        while not stop.requested:
            tick()
            if real is not None and (handle := await real.submit_once_served(client)) is not None:
                handles.append(handle)
            states = [await h.status() for h in handles]
            for state in states:
                if state.status == TaskStatus.awaiting_budget and state.task_id not in topped_up:
                    topped_up.add(state.task_id)
                    await client.task(state.task_id).raise_budget(TOP_UP_TOKENS)
                if state.task_id == spot_task and preempted is None and state.step >= PREEMPT_AFTER_STEP:
                    preempted = await _preempt_spot_node_serving(client, state.task_id)
            live.update(Group(_table(states, topped_up), real.note if real is not None else ""))
            if all(s.status.is_final for s in states) and (real is None or real.settled):
                break
            await asyncio.sleep(0.5)
    console.print(_summary(states))
    if spot_policy is not None:
        await client.set_policy(ON_SPOT[1], spot_policy)  # as it was: its idle replicas go again
    if nodes and states and all(s.status.is_final for s in states):
        rows = [row for state in states for row in await step_rows(client, state)]
        console.print(placements_table(rows, prefix=prefix))
        if preempted is not None:
            interrupted = await interruption_rows(client, states)
            if interrupted:
                console.print(interruptions_table(interrupted, prefix=prefix))
            moved = next((d for task_id, d in rows if task_id == spot_task and d.node_id != preempted), None)
            cut = next((d for task_id, d in interrupted if task_id == spot_task), None)
            if moved is not None:
                what = (
                    f"cut step {cut.step}'s generation after {cut.tokens_kept} tokens, which it kept"
                    f" ({cut.tokens_lost} lost), and the step ran again {cut.resume_s or 0:.1f} s later"
                    if cut is not None
                    else "came between two steps, so nothing was cut"
                )
                console.print(
                    f"The spot node {preempted} was reclaimed with {PREEMPT_NOTICE_S:g} s notice; the"
                    f" preemption {what}. The batch task resumed at step {moved.step} on"
                    f" {moved.node_id} from its checkpoint."
                )
    if states:
        console.print(
            f"See them in the admin UI: {config.resolved_api_url}/tasks?q={prefix} (sign in with the"
            f" admin key); a task's page shows its steps, budget, interruptions and checkpoints."
        )
    return states


class _RealModelTask:
    """The real model's question, put once a node that runs llama.cpp has joined; given up after REAL_MODEL_WAIT_S."""

    def __init__(self, task_id: str) -> None:
        self.task_id = task_id
        self.submitted = False
        self.gave_up = False
        self.note = f"{REAL_MODEL[1]} (the real model, on this CPU) joins when llama.cpp is installed"
        self._deadline = time.monotonic() + REAL_MODEL_WAIT_S
        self._looked_at = 0.0

    @property
    def settled(self) -> bool:
        return self.submitted or self.gave_up

    async def submit_once_served(self, client: Client) -> TaskHandle | None:
        if self.settled or time.monotonic() - self._looked_at < 2.0:
            return None
        self._looked_at = time.monotonic()
        if not any("llama.cpp" in n.engines for n in await client.nodes(status="healthy")):
            if time.monotonic() > self._deadline:
                self.gave_up = True
                self.note = (
                    f"{REAL_MODEL[1]} did not join within {REAL_MODEL_WAIT_S / 60:.0f} min: see"
                    " .berth/engine-build.log and the cpu-local node's log"
                )
            return None
        agent, model, text, tokens = REAL_MODEL
        self.submitted = True
        self.note = f"{model} joined: llama.cpp is installed, and the real model answers {self.task_id}"
        return await _submit(client, agent, text, tokens, self.task_id, model=model)


async def _preempt_spot_node_serving(client: Client, task_id: str) -> str | None:
    """Reclaim the spot node that served the task's last step, with a short notice; its id, or None."""
    settled = [e for e in (await client.task(task_id).ledger()).entries if e.kind == "settled"]
    node_id = settled[-1].served_by.split("/")[0] if settled else ""
    if not node_id or (await client.node(node_id)).capacity != "spot":
        return None
    await client.preempt_node(node_id, PREEMPT_NOTICE_S)
    return node_id


async def _prewarm(client: Client, console: Console, model: str, datacenter: str) -> None:
    """Put `model`'s weights on the disks of `datacenter`'s nodes and wait until each of them reports them
    (the step then goes to the one that suits it, not to the first copy to land)."""
    started = await client.prewarm(model, datacenter=datacenter)
    console.print(
        f"prewarming {model} in {datacenter}: "
        + (", ".join(f"{n.node_id} (from {n.source})" for n in started.nodes) or "already there")
    )
    fetching = {n.node_id for n in started.nodes}
    deadline = time.monotonic() + PREWARM_WAIT_S
    while time.monotonic() < deadline:
        nodes = await client.nodes(datacenter=datacenter)
        if fetching <= {n.node_id for n in nodes if any(w.model == model for w in n.cached_weights)}:
            return
        await asyncio.sleep(0.5)


async def _submit(
    client: Client,
    agent: str,
    text: str,
    tokens: int,
    task_id: str,
    attempts: int = 30,
    model: str | None = None,
    service_class: ServiceClass = "interactive",
) -> TaskHandle:
    """Submit, retrying while a just-started Temporal is still unavailable (safe: the task id makes it idempotent)."""
    for attempt in range(attempts):
        try:
            return await client.submit(
                agent, text, budget=Budget(tokens), task_id=task_id, model=model, service_class=service_class
            )
        except BerthError as exc:
            if exc.status_code != 503 or attempt == attempts - 1:
                raise
            await asyncio.sleep(1)
    raise AssertionError("unreachable")


async def _wait_for_nodes(client: Client, count: int, timeout_s: float = 60) -> None:
    """The node agents join a few seconds after the API is up; the demo's placements need them."""
    deadline = time.monotonic() + timeout_s
    while len(await client.nodes(status="healthy")) < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{count} GPU node(s) did not join within {timeout_s:.0f}s; see the node logs")
        await asyncio.sleep(0.5)


async def _wait_for_agents(client: Client, names: set[str], timeout_s: float = 60) -> None:
    """The tool worker registers the sample agents when it starts; wait for it."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if names <= {a.name for a in await client.agents()}:
            return
        await asyncio.sleep(0.5)
    raise TimeoutError(f"agents {sorted(names)} were not registered within {timeout_s:.0f}s")


def _table(states: list[TaskState], topped_up: set[str]) -> Table:
    table = Table(title="Berth demo — live")
    for col in ("task", "agent", "status", "step", "tokens used / limit", "note"):
        table.add_column(col)
    for s in states:
        note = s.waiting_for or ("budget topped up" if s.task_id in topped_up else "")
        if s.children:
            note = f"{len(s.children)} sub-agents " + note
        table.add_row(
            s.task_id, s.agent, s.status.value, str(s.step), f"{s.spend.tokens_used:,} / {s.spend.token_limit:,}", note
        )
    return table


def _summary(states: list[TaskState]) -> Table:
    table = Table(title="Demo summary")
    for col in ("task", "agent", "status", "steps", "tokens", "usd", "answer"):
        table.add_column(col)
    for s in states:
        answer = (s.result or s.error or "").replace("\n", " ")
        table.add_row(
            s.task_id,
            s.agent,
            s.status.value,
            str(s.step),
            f"{s.spend.tokens_used:,}",
            f"${s.spend.usd_used:.6f}",
            answer[:80] + ("…" if len(answer) > 80 else ""),
        )
    return table
