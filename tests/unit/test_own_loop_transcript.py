"""An own loop's conversation as both ends hash it, and what the workflow's side of it accepts."""

from __future__ import annotations

import pytest
from temporalio.exceptions import ApplicationError

from orchestrator.api.chat_wire import ChatRequest
from sdk import Message, ToolCall
from sdk.wire.own_loop import LoopCall, LoopReply, LoopToolResult
from sdk.wire.transcript import EMPTY_CHAIN, chain_of, request_hash
from workflows.loop_record import LoopRecord, opening

USER = Message(role="user", content="H100 bandwidth")
ASKS = Message(role="assistant", tool_calls=[ToolCall(id="call-1", name="lookup", arguments='{"s": "H100"}')])


def test_a_message_hashes_by_what_the_model_sees_in_one_spelling() -> None:
    assert chain_of([Message(role="assistant", content=None)]) == chain_of([Message(role="assistant", content="")])
    named = Message(role="tool", content="notes", tool_call_id="call-1", name="lookup")
    assert chain_of([named]) == chain_of([named.model_copy(update={"name": None})])
    assert chain_of([USER]) != chain_of([USER.model_copy(update={"content": "A100 bandwidth"})])
    assert chain_of([USER, ASKS])[0] == chain_of([USER])[0]  # a chain extends: its prefix hashes as before


def test_a_call_is_named_by_its_conversation_instructions_tools_and_settings() -> None:
    chain = chain_of([USER])[-1]
    base = request_hash(chain, "Be brief.", [], {"temperature": 0.2})
    assert base == request_hash(chain, "Be brief.", [], {"temperature": 0.2})
    assert base != request_hash(chain, "Be thorough.", [], {"temperature": 0.2})  # a handoff's new instructions
    assert base != request_hash(chain, "Be brief.", [], {"temperature": 0.3})
    assert base != request_hash(EMPTY_CHAIN, "Be brief.", [], {"temperature": 0.2})


def call(loop: LoopRecord, new: list[Message], instructions: str = "Research.") -> LoopCall:
    held = loop.transcript()
    chain = chain_of(new, start=held.chain)[-1] if new else held.chain
    return LoopCall(
        request_hash=request_hash(chain, instructions, [], {}),
        prefix_length=held.length,
        prefix_chain=held.chain,
        new_messages=new,
        instructions=instructions,
    )


def test_the_loop_extends_its_conversation_replays_answered_calls_and_refuses_a_moved_one() -> None:
    loop = LoopRecord(opening([USER]))
    assert loop.transcript().length == 1
    first = call(loop, [])
    loop.check_extends(first)
    loop.take(first, LoopReply(step=1, message=ASKS, prompt_tokens=10, completion_tokens=5))
    assert loop.transcript().length == 2

    again = loop.answered(first)
    assert again is not None and again.replayed and again.message == ASKS

    stale = first.model_copy(update={"request_hash": "0" * 64})  # the conversation of one message, not two
    with pytest.raises(ApplicationError, match="messages: .* must extend it") as refused:
        loop.check_extends(stale)
    assert refused.value.type == "TranscriptMoved"


def test_tool_results_are_kept_only_for_calls_its_replies_made_and_the_first_stands() -> None:
    loop = LoopRecord(opening([USER]))
    with pytest.raises(ApplicationError, match="call_id: 'call-1' is no tool call") as refused:
        loop.record_tool_result(LoopToolResult(call_id="call-1", content="forged"))
    assert refused.value.type == "UnknownToolCall"
    first = call(loop, [])
    loop.take(first, LoopReply(step=1, message=ASKS))
    loop.record_tool_result(LoopToolResult(call_id="call-1", content="notes"))
    loop.record_tool_result(LoopToolResult(call_id="call-1", content="other notes"))
    assert loop.tool_result("call-1") == "notes" and loop.tool_result("call-2") is None


def test_the_loop_keeps_only_what_its_checkpoint_store_does_not_hold_yet() -> None:
    """A long loop's replies and tool results leave the workflow's state once its conversation is written, so the
    state carried over continue-as-new (a Temporal payload, 2 MiB at most) stays one call's size. Before, 60 calls
    of 30 KB answers and 30 KB tool results carried all 3.6 MB."""
    loop = LoopRecord(opening([USER]))
    long = "x" * 30_000
    new: list[Message] = []
    for n in range(1, 61):
        asked = call(loop, new)
        loop.absorb(asked.new_messages)
        loop.forget_written()  # the step wrote its predecessor: everything absorbed so far is in the store
        asks = Message(role="assistant", content=long, tool_calls=[ToolCall(id=f"call-{n}", name="lookup")])
        loop.take(asked, LoopReply(step=n, message=asks))
        loop.record_tool_result(LoopToolResult(call_id=f"call-{n}", content=long))
        new = [Message(role="tool", tool_call_id=f"call-{n}", content=long)]
    progress = loop.progress
    assert len(progress.model_dump_json()) < 200_000, len(progress.model_dump_json())
    assert progress.length == 1 + 60 + 59  # the input, 60 replies, the tool results sent with the next 59 calls
    # The last reply and the last tool result are not written yet: kept whole. The others point into the store.
    kept = [r for r in progress.replies.values() if r.message is not None]
    assert [r.step for r in kept] == [60]
    first = next(r for r in progress.replies.values() if r.step == 1)
    assert first.message is None and first.message_index == 1
    assert loop.tool_result("call-60") == long and loop.tool_result("call-1") is None
    # A result reported again once the store holds it changes nothing: the first report stands.
    loop.record_tool_result(LoopToolResult(call_id="call-1", content="other"))
    assert loop.tool_result("call-1") is None


def test_a_chat_request_splits_its_instructions_from_the_conversation() -> None:
    request = ChatRequest.model_validate(
        {
            "messages": [
                {"role": "system", "content": "Research."},
                {"role": "developer", "content": "Cite."},
                {"role": "user", "content": [{"type": "text", "text": "H100 "}, {"type": "text", "text": "bandwidth"}]},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call-1",
                            "type": "function",
                            "function": {"name": "lookup", "arguments": '{"s": "H100"}'},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "call-1", "content": "notes"},
            ]
        }
    )
    instructions, conversation = request.split()
    assert instructions == "Research.\n\nCite."
    assert [m.role for m in conversation] == ["user", "assistant", "tool"]
    assert conversation[0].content == "H100 bandwidth" and conversation[1].tool_calls[0].id == "call-1"
