"""What a recorded step's tool calls add to the metrics: calls and failed calls, by tool, agent and tenant.

Counted where the step is recorded (`store_books.record_step`), when its checkpoint is first written: a retried
write finds the same checkpoint and counts nothing, and the workflow, whose code is replayed, records nothing.
The step's tool messages are its calls' results, whoever ran them (an author's tool worker, a sub-agent, a
human's answer, the author's own loop). A call failed when Berth reported it back to the model as failed: its
result begins with TOOL_ERROR (a tool that raised through all its attempts, bad arguments, an unknown tool, no
answer in time).

Tool names come from the model (and, in an own loop, from the author's client), so they are bounded here: a
call the agent could not run (an unknown tool, one over the per-step cap) is labelled OTHER_TOOL, and so is any
name past the first MAX_TOOL_NAMES this process has seen, so a model that invents names cannot grow the series
without end.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from opentelemetry import metrics

from sdk import Message, TaskState

TOOL_ERROR = "tool error:"
# Results of calls that never reached a tool: their names are whatever the model made up.
NOT_RUN = (f"{TOOL_ERROR} unknown tool", f"{TOOL_ERROR} at most")
OTHER_TOOL = "other"
# Tens of tools an agent, tens of agents a worker: 256 names leave room for both, and cap a runaway's series.
MAX_TOOL_NAMES = 256

_meter = metrics.get_meter("berth.activities.tools")
_calls = _meter.create_counter(
    "berth_tool_calls", unit="{call}", description="tool calls of recorded steps, by tool, agent and tenant"
)
_failures = _meter.create_counter(
    "berth_tool_call_failures",
    unit="{call}",
    description="tool calls Berth reported back to the model as failed, by tool, agent and tenant",
)
_names: set[str] = set()
_names_lock = threading.Lock()


def _tool_label(message: Message) -> str:
    name = message.name or ""
    if not name or (message.content or "").startswith(NOT_RUN):
        return OTHER_TOOL
    with _names_lock:
        if name not in _names and len(_names) >= MAX_TOOL_NAMES:
            return OTHER_TOOL
        _names.add(name)
    return name


def record_tool_calls(state: TaskState, new_messages: Iterable[Message]) -> None:
    """Count the tool results among a newly recorded step's messages."""
    for message in new_messages:
        if message.role != "tool":
            continue
        labels = {"tool": _tool_label(message), "agent": state.agent, "tenant": state.tenant}
        _calls.add(1, labels)
        if (message.content or "").startswith(TOOL_ERROR):
            _failures.add(1, labels)
