"""Where each step of the demo ran and why (the `llm_call` events), and its interruptions, as tables.

Each model call's event carries its placement (node, GPUs, replica, locality tier, the score
term that decided, queue wait, load time), so the table reads straight off the event stream:
a first step that loaded a replica from origin, later steps on the warm replica, a model
whose weights were prewarmed loading from disk.
"""

from __future__ import annotations

from rich.table import Table

from sdk import Client, TaskState
from sdk.wire.task_events import Interruption, InterruptionEvent, ModelCall, ModelCallEvent, parse_event

WHY = {
    "warm": "warm replica",
    "loading": "joined a load",
    "disk": "load from disk",
    "datacenter": "load from DC peer",
    "origin": "cold load (origin)",
}


async def step_rows(client: Client, state: TaskState) -> list[tuple[str, ModelCall]]:
    """(task id, model call) for the task and its sub-agents, in step order."""
    rows = [
        (state.task_id, typed.data)
        async for e in client.task(state.task_id).events()
        if isinstance(typed := parse_event(e), ModelCallEvent)
    ]
    for child in state.children:
        rows += await step_rows(client, await client.task(child).status())
    return rows


def placements_table(rows: list[tuple[str, ModelCall]], prefix: str = "") -> Table:
    """One row per model call; `prefix` is cut from task ids (the demo's shared stamp)."""
    table = Table(title="Where each step ran, and why")
    for col in ("task", "step", "node", "GPUs", "placed on", "decided by", "queue s", "load s", "TTFT s"):
        table.add_column(col)
    for task_id, call in rows:
        node = call.node_id
        gpus = f"{call.gpu_type} {','.join(map(str, call.gpu_indexes or []))}" if node else "-"
        table.add_row(
            task_id.removeprefix(prefix),
            str(call.step),
            node or call.served_by,
            gpus,
            WHY.get(call.tier or "", "provider" if not node else str(call.tier)),
            call.decided_by or "-",
            _num(call.queue_wait_s),
            _num(call.load_s),
            _num(call.ttft_s),
        )
    return table


def _num(value: object, digits: int = 2) -> str:
    return f"{value:.{digits}f}" if isinstance(value, (int, float)) else "-"


async def interruption_rows(client: Client, states: list[TaskState]) -> list[tuple[str, Interruption]]:
    """(task id, interruption) of the tasks that were interrupted."""
    rows: list[tuple[str, Interruption]] = []
    for state in states:
        if state.interruptions:
            rows += [
                (state.task_id, typed.data)
                async for e in client.task(state.task_id).events()
                if isinstance(typed := parse_event(e), InterruptionEvent)
            ]
    return rows


def interruptions_table(rows: list[tuple[str, Interruption]], prefix: str = "") -> Table:
    table = Table(title="Interruptions: where a step was cut, what it cost, where it resumed")
    for col in ("task", "step", "node", "kind", "tokens kept", "tokens lost", "resumed on", "after s"):
        table.add_column(col)
    for task_id, cut in rows:
        table.add_row(
            task_id.removeprefix(prefix),
            str(cut.step),
            str(cut.node_id),
            cut.kind,
            str(cut.tokens_kept),
            str(cut.tokens_lost),
            f"{cut.resumed_on} ({cut.resumed_tier})",
            _num(cut.resume_s),
        )
    return table
