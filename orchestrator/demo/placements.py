"""Where each step of the demo ran and why (the `llm_call` events), and its interruptions, as tables.

Each model call's event carries its placement (node, GPUs, replica, locality tier, the score
term that decided, queue wait, load time), so the table reads straight off the event stream:
a first step that loaded a replica from origin, later steps on the warm replica, a model
whose weights were prewarmed loading from disk.
"""

from __future__ import annotations

from rich.table import Table

from sdk import Client, TaskState

WHY = {
    "warm": "warm replica",
    "loading": "joined a load",
    "disk": "load from disk",
    "datacenter": "load from DC peer",
    "origin": "cold load (origin)",
}


async def step_rows(client: Client, state: TaskState) -> list[tuple[str, dict]]:
    """(task id, llm_call event data) for the task and its sub-agents, in step order."""
    rows = [(state.task_id, e.data) async for e in client.task(state.task_id).events() if e.kind == "llm_call"]
    for child in state.children:
        rows += await step_rows(client, await client.task(child).status())
    return rows


def placements_table(rows: list[tuple[str, dict]], prefix: str = "") -> Table:
    """One row per model call; `prefix` is cut from task ids (the demo's shared stamp)."""
    table = Table(title="Where each step ran, and why")
    for col in ("task", "step", "node", "GPUs", "placed on", "decided by", "queue s", "load s", "TTFT s"):
        table.add_column(col)
    for task_id, d in rows:
        node = d.get("node_id")
        gpus = f"{d.get('gpu_type')} {','.join(map(str, d.get('gpu_indexes') or []))}" if node else "-"
        table.add_row(
            task_id.removeprefix(prefix),
            str(d.get("step")),
            node or d.get("served_by", ""),
            gpus,
            WHY.get(d.get("tier") or "", "provider" if not node else str(d.get("tier"))),
            d.get("decided_by") or "-",
            _num(d.get("queue_wait_s")),
            _num(d.get("load_s")),
            _num(d.get("ttft_s")),
        )
    return table


def _num(value: object, digits: int = 2) -> str:
    return f"{value:.{digits}f}" if isinstance(value, (int, float)) else "-"


async def interruption_rows(client: Client, states: list[TaskState]) -> list[tuple[str, dict]]:
    """(task id, interruption event data) of the tasks that were interrupted."""
    rows: list[tuple[str, dict]] = []
    for state in states:
        if state.interruptions:
            rows += [
                (state.task_id, e.data) async for e in client.task(state.task_id).events() if e.kind == "interruption"
            ]
    return rows


def interruptions_table(rows: list[tuple[str, dict]], prefix: str = "") -> Table:
    table = Table(title="Interruptions: where a step was cut, what it cost, where it resumed")
    for col in ("task", "step", "node", "kind", "tokens kept", "tokens lost", "resumed on", "after s"):
        table.add_column(col)
    for task_id, d in rows:
        table.add_row(
            task_id.removeprefix(prefix),
            str(d.get("step")),
            str(d.get("node_id")),
            str(d.get("kind")),
            str(d.get("tokens_kept", 0)),
            str(d.get("tokens_lost", 0)),
            f"{d.get('resumed_on')} ({d.get('resumed_tier')})",
            _num(d.get("resume_s")),
        )
    return table
