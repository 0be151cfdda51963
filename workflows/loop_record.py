"""The record a task keeps of its author's own loop: which calls it answered, and what is owed.

Each model call of the loop arrives with the messages it adds to the conversation the workflow holds; a call
that does not extend it exactly (a stale prefix, a rewritten history) is refused rather than guessed at. A call
the workflow answered before (the loop re-ran after a crash) is answered again from here, unchanged and free.
Tool results are kept only for calls a reply of this task made, so a caller cannot park data under other ids.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from sdk import Message
    from sdk.wire.loop_approvals import ApprovalDecision, ApprovalRequest, Decided, LoopApprovals
    from sdk.wire.own_loop import LoopCall, LoopProgress, LoopReply, LoopToolResult, LoopTranscript
    from sdk.wire.transcript import EMPTY_CHAIN, chain_of


class LoopRecord:
    """The loop's record (the task state's `own_loop`), read and kept through the calls that arrive."""

    def __init__(self, progress: LoopProgress) -> None:
        self.progress = progress

    def transcript(self) -> LoopTranscript:
        return LoopTranscript(length=self.progress.length, chain=self.progress.chain)

    def answered(self, call: LoopCall) -> LoopReply | None:
        """The reply this very call got before, marked as replayed."""
        reply = self.progress.replies.get(call.request_hash)
        return reply.model_copy(update={"replayed": True}) if reply is not None else None

    def check_extends(self, call: LoopCall) -> None:
        """Refuse a call whose prefix is not the conversation held here (the API asks again with a fresh one)."""
        p = self.progress
        if call.prefix_length != p.length or call.prefix_chain != p.chain:
            raise ApplicationError(
                f"messages: the call's first {call.prefix_length} messages are not the task's conversation of"
                f" {p.length}: an own loop's calls must extend it (send the whole conversation each call)",
                type="TranscriptMoved",
                non_retryable=True,
            )

    def absorb(self, messages: list[Message]) -> None:
        """The call's new messages join the conversation as its step begins (a call that then fails has still
        added them: its retry, or the loop's next call, sends them as part of the prefix)."""
        p = self.progress
        if messages:
            p.chain = chain_of(messages, start=p.chain)[-1]
            p.length += len(messages)
        for m in messages:
            if m.role == "tool" and p.tool_results.get(m.tool_call_id or "") is not None:
                p.results_absorbed.append(m.tool_call_id or "")

    def take(self, call: LoopCall, reply: LoopReply) -> None:
        """A generated reply: the conversation grows by it, and it is kept for the call's replays."""
        at = self.progress.length
        self.absorb([reply.answer])
        self.progress.replies[call.request_hash] = reply.model_copy(
            update={"asked_on": call.conversation, "asked_shape": call.shape, "message_index": at}
        )
        self.progress.call_ids.extend(c.id for c in reply.answer.tool_calls or ())

    def forget_written(self) -> None:
        """The conversation so far is written to the checkpoint store (a step's predecessor): drop the replies'
        messages and the tool results it holds, which the API reads there from now on."""
        p = self.progress
        for key, reply in p.replies.items():
            if reply.message is not None and reply.message_index is not None and reply.message_index < p.length:
                p.replies[key] = reply.model_copy(update={"message": None})
        for call_id in p.results_absorbed:
            p.tool_results[call_id] = None
        p.results_absorbed.clear()

    def asked_on(self, conversation: str) -> list[dict[str, str]]:
        """The shapes of the calls answered on this very conversation (a call sent again with other settings
        differs from one of them)."""
        return [r.asked_shape for r in self.progress.replies.values() if r.asked_on == conversation]

    def record_tool_result(self, result: LoopToolResult) -> None:
        """Keep what a tool returned, for a call one of this task's replies made (the first report stands)."""
        if result.call_id not in self.progress.call_ids:
            raise ApplicationError(
                f"call_id: {result.call_id!r} is no tool call this task's model made",
                type="UnknownToolCall",
                non_retryable=True,
            )
        self.progress.tool_results.setdefault(result.call_id, result.content)

    def tool_result(self, call_id: str) -> str | None:
        """The result reported for the call, unless the stored conversation holds it (the API looks there)."""
        return self.progress.tool_results.get(call_id)

    # ----- tool calls that wait for a person (docs/own-loop.md, "Approvals") -----------------
    @property
    def awaiting_approval(self) -> bool:
        return awaiting_approval(self.progress)

    def ask_approval(self, request: ApprovalRequest, now: float) -> bool:
        """Hold the calls the loop stopped at, and its state; False when these very calls are held already (the
        loop re-ran after a crash and stopped at them again: the decisions made meanwhile stand)."""
        held = self.progress.approvals
        if held is not None and [c.call_id for c in held.calls] == [c.call_id for c in request.calls]:
            return False
        unknown = [c.call_id for c in request.calls if c.call_id not in self.progress.call_ids]
        if unknown:
            raise ApplicationError(
                f"calls: {unknown[0]!r} is no tool call this task's model made",
                type="UnknownToolCall",
                non_retryable=True,
            )
        self.progress.approvals = LoopApprovals(
            calls=request.calls, run_state=request.run_state, trace_id=request.trace_id, asked_at=now
        )
        return True

    def check_decision(self, decision: ApprovalDecision) -> None:
        a = self.progress.approvals
        waiting = a.waiting if a is not None else []
        if not waiting:
            raise ApplicationError("task: no tool call of its loop waits for approval", type="NothingToApprove")
        if decision.call_id is not None and decision.call_id not in {c.call_id for c in waiting}:
            names = ", ".join(c.call_id for c in waiting)
            raise ApplicationError(f"call_id: {decision.call_id!r} does not wait for approval (these do: {names})")

    def decide(self, decision: ApprovalDecision) -> list[str]:
        """Record a person's word on one waiting call, or on all of them; the call ids it decided."""
        a = self.progress.approvals
        assert a is not None  # check_decision refused otherwise
        ids = [c.call_id for c in a.waiting if decision.call_id in (None, c.call_id)]
        for call_id in ids:
            a.decisions[call_id] = Decided(
                approved=decision.approve, reason=None if decision.approve else decision.reason
            )
        return ids

    def approval_due_at(self, timeout_s: float) -> float | None:
        """When the waiting calls are rejected for want of a decision (None while none waits)."""
        a = self.progress.approvals
        return a.asked_at + timeout_s if a is not None and a.waiting else None


def awaiting_approval(progress: LoopProgress | None) -> bool:
    """Tool calls of the loop wait for a person's word (None: the task runs Berth's loop)."""
    a = progress.approvals if progress is not None else None
    return a is not None and bool(a.waiting)


def opening(messages: list[Message]) -> LoopProgress:
    """The record of a loop that made no call yet: its conversation is the task's opening `messages`."""
    chain = chain_of(messages)
    return LoopProgress(length=len(messages), chain=chain[-1] if chain else EMPTY_CHAIN)
