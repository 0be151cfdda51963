"""Wire types of an own loop's tool calls that wait for a person (an Agents SDK tool with `needs_approval`).

The loop stops at such a call and asks its task to hold it: the task waits `awaiting_input` with a question
naming each tool and its arguments, and keeps the loop's own state (the Agents SDK's `RunState`, serialised and
compressed by the loop, opaque to Berth) so that the loop, or a re-run of it after its process died, resumes from
there once a person approved or rejected each call. The API sends these to the workflow.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from .._state import ToolCallToApprove
from .limits import MAX_INPUT_CHARS, MAX_REASON_CHARS

LOOP_ASK_APPROVAL_UPDATE = "loop_ask_approval"
LOOP_DECIDE_UPDATE = "loop_decide"
LOOP_APPROVALS_QUERY = "loop_approvals"

# The loop's state travels in the update's payload, in query answers and in continue-as-new's input beside the
# rest of the task's progress. Temporal refuses a payload over 2 MB (and warns from 512 KB): a quarter of a MB
# of compressed state (a conversation of several MB of text) leaves the rest of the task's input room.
MAX_RUN_STATE_CHARS = 256 * 1024
MAX_CALLS_TO_APPROVE = 64  # as many as one step's tool calls (agent_task.MAX_TOOL_CALLS_PER_STEP)


class ApprovalRequest(BaseModel):
    """The loop stopped at tool calls that need a person's approval; `run_state` is where it stands."""

    calls: list[ToolCallToApprove] = Field(min_length=1, max_length=MAX_CALLS_TO_APPROVE)
    run_state: str = Field(min_length=1, max_length=MAX_RUN_STATE_CHARS)
    trace_id: str | None = Field(default=None, max_length=256, description="the loop's own trace (Agents SDK)")


class ApprovalDecision(BaseModel):
    """A person's word on one call (`call_id`), or on every call still waiting (no `call_id`)."""

    approve: bool
    call_id: str | None = Field(default=None, min_length=1, max_length=256)
    reason: str | None = Field(default=None, max_length=MAX_REASON_CHARS, description="told to the model on a reject")


class Decided(BaseModel):
    approved: bool
    reason: str | None = None


class LoopApprovals(BaseModel):
    """The calls the loop last stopped at, the decisions made on them so far, and the loop's state then."""

    calls: list[ToolCallToApprove]
    decisions: dict[str, Decided] = Field(default_factory=dict)
    run_state: str
    trace_id: str | None = None
    asked_at: float = (
        0.0  # workflow time of the ask (a decision not made in the agent's ask_human_timeout_s is a reject)
    )

    @property
    def waiting(self) -> list[ToolCallToApprove]:
        return [c for c in self.calls if c.call_id not in self.decisions]


def approval_question(calls: list[ToolCallToApprove]) -> str:
    """The task's question while its loop waits: each tool and its arguments, and what a person may do."""
    named = "; ".join(f"{c.tool}({c.arguments})" for c in calls)
    text = f"Approve or reject: {named}"
    return text if len(text) <= MAX_INPUT_CHARS else text[: MAX_INPUT_CHARS - 1] + "…"
