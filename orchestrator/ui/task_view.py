"""A task's detail page, gathered from the store: its state, spend, steps, tool calls, interruptions, checkpoints.

Steps are read from the `llm_call` events (one per answered call: node, GPU, locality tier, queue
wait, TTFT, tokens, cost), tool calls from the latest checkpoint's conversation (the arguments
the model sent and what each tool answered), so the page shows what the task really did rather
than what the workflow meant to do.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from sdk import Message, TaskSpec, TaskState
from sdk.wire.task_events import InterruptionEvent, ModelCallEvent, TypedTaskEvent, events_of, parse_event

from ..store import CheckpointCorrupt, CheckpointNotFound, CheckpointSummary, LedgerTotals, Store
from .timeline import Timeline, step_timeline

# The page is for a person: the first steps and the latest ones matter; thousands do not fit on it.
STEPS_SHOWN = 200
TOOL_TEXT_SHOWN = 2000
# A sub-agent tree is read task by task: deep or wide ones are cut here, and the page says so.
TREE_DEPTH, TREE_SHOWN = 4, 100
RESULT_SUMMARY = 240
# The timeline reads the task's events (every kind says something about where its time went); a task with more
# than this many shows its first ones' steps (the table has the rest).
TIMELINE_EVENTS = 20_000


@dataclass(frozen=True)
class TreeNode:
    """A sub-agent in the task's tree: its depth under the task (1: a child) and its state."""

    depth: int
    state: TaskState


@dataclass(frozen=True)
class ToolCallView:
    step: int
    name: str
    arguments: str
    result: str | None


@dataclass
class TaskDetail:
    state: TaskState
    spec: TaskSpec | None
    totals: LedgerTotals
    children: list[TaskState]
    steps: list[ModelCallEvent]
    tool_calls: list[ToolCallView]
    interruptions: list[InterruptionEvent]
    checkpoints: list[CheckpointSummary]
    timeline: Timeline
    tree: list[TreeNode] = field(default_factory=list)
    tree_cut: bool = False
    last_seq: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def children_tokens(self) -> int:
        return sum(c.spend.tokens_used for c in self.children)

    @property
    def result_summary(self) -> str:
        """The result's opening, for the line a collapsed result shows."""
        result = (self.state.result or "").strip()
        first = " ".join(result.split())
        return first if len(first) <= RESULT_SUMMARY else first[:RESULT_SUMMARY].rsplit(" ", 1)[0] + " …"

    @property
    def duration_s(self) -> float | None:
        """From its start to its end (to now while it runs)."""
        start = self.state.started_at
        if start is None:
            return None
        end = self.state.updated_at if self.state.status.is_final and self.state.updated_at else datetime.now(UTC)
        return max(0.0, (end - start).total_seconds())


def task_detail(store: Store, state: TaskState, spec_json: str | None) -> TaskDetail:
    """Everything the page shows of `state`'s task (the caller has already been checked against its tenant)."""
    task_id = state.task_id
    steps = events_of(ModelCallEvent, store.events.of_kind(task_id, ModelCallEvent.KIND, limit=STEPS_SHOWN))
    interruptions = events_of(InterruptionEvent, store.events.of_kind(task_id, InterruptionEvent.KIND))
    until = state.updated_at if state.status.is_final and state.updated_at else datetime.now(UTC)
    tree, cut = sub_agent_tree(store, state)
    detail = TaskDetail(
        state=state,
        spec=TaskSpec.model_validate_json(spec_json) if spec_json else None,
        totals=store.ledger.totals(task_id),
        children=[record.state for record in map(store.tasks.get, state.children) if record is not None],
        steps=steps,
        tool_calls=[],
        interruptions=interruptions,
        checkpoints=store.checkpoints.list(task_id),
        timeline=step_timeline(
            timeline_events(store, task_id), state.started_at, until, live=not state.status.is_final
        ),
        tree=tree,
        tree_cut=cut,
        last_seq=store.events.last_seq(task_id),
    )
    detail.tool_calls, note = _tool_calls(store, task_id)
    if note:
        detail.notes.append(note)
    return detail


def timeline_events(store: Store, task_id: str) -> list[TypedTaskEvent]:
    """The task's events, typed, oldest first (at most TIMELINE_EVENTS), for its timeline."""
    events: list[TypedTaskEvent] = []
    after = 0
    while len(events) < TIMELINE_EVENTS:
        page = store.events.read(task_id, after, limit=TIMELINE_EVENTS - len(events))
        if not page:
            break
        events.extend(map(parse_event, page))
        after = page[-1].seq
    return events


def sub_agent_tree(store: Store, state: TaskState) -> tuple[list[TreeNode], bool]:
    """The task's sub-agents, each followed by its own (depth first, in spawn order); True when cut short."""
    tree: list[TreeNode] = []
    cut = False

    def visit(children: list[str], depth: int) -> None:
        nonlocal cut
        for child_id in children:
            if len(tree) >= TREE_SHOWN:
                cut = True
                return
            record = store.tasks.get(child_id)
            if record is None:
                continue
            tree.append(TreeNode(depth, record.state))
            if record.state.children:
                if depth >= TREE_DEPTH:
                    cut = True
                else:
                    visit(record.state.children, depth + 1)

    visit(state.children, 1)
    return tree, cut


def _tool_calls(store: Store, task_id: str) -> tuple[list[ToolCallView], str | None]:
    latest = store.checkpoints.latest(task_id)
    if latest is None:
        return [], None
    try:
        messages = store.checkpoints.read(latest.id).messages
    except (CheckpointNotFound, CheckpointCorrupt) as exc:
        return [], f"the tool calls could not be read from checkpoint {latest.seq}: {exc}"
    return tool_calls_of(messages), None


def tool_calls_of(messages: list[Message]) -> list[ToolCallView]:
    """Each call the model made, numbered by the step (assistant reply) that made it, with its tool's answer."""
    answers = {m.tool_call_id: m.content for m in messages if m.role == "tool" and m.tool_call_id}
    calls: list[ToolCallView] = []
    step = 0
    for message in messages:
        if message.role != "assistant":
            continue
        step += 1
        for call in message.tool_calls or []:
            result = answers.get(call.id)
            calls.append(
                ToolCallView(
                    step,
                    call.name,
                    call.arguments[:TOOL_TEXT_SHOWN],
                    result[:TOOL_TEXT_SHOWN] if result is not None else None,
                )
            )
    return calls
