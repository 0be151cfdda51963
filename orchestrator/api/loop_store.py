"""What an own loop's workflow hands over to the checkpoint store: the messages of replies and the tool results
its written conversation holds (workflows/loop_record.py `forget_written`). The workflow keeps only what is not
written yet, so its state stays within Temporal's payloads however long the loop runs; a replayed call's reply and
a tool result reported long ago are read back here, from the task's newest checkpoint.
"""

from __future__ import annotations

from sdk import Message
from sdk.wire.own_loop import LoopReply
from sdk.wire.transcript import EMPTY_CHAIN, chain_of

from .errors import ApiError
from .services import Services


async def whole_reply(svc: Services, task_id: str, reply: LoopReply) -> LoopReply:
    """The reply with its message: as the workflow sent it, or read from the task's stored conversation at the
    place the workflow named, checked to follow exactly the conversation the call was answered on."""
    if reply.message is not None:
        return reply
    stored = await svc.db(svc.store.checkpoints.read_latest, task_id)
    at = reply.message_index
    messages = stored.messages if stored is not None else []
    if at is None or at >= len(messages) or _chain_before(messages, at) != (reply.asked_on or EMPTY_CHAIN):
        raise ApiError(
            503,
            f"task {task_id}'s reply of step {reply.step} is not in its stored conversation yet: send the call again",
            field="messages",
        )
    return reply.model_copy(update={"message": messages[at]})


async def stored_tool_result(svc: Services, task_id: str, call_id: str) -> str | None:
    """The result of tool call `call_id` as the task's stored conversation holds it (its tool message), if it does."""
    stored = await svc.db(svc.store.checkpoints.read_latest, task_id)
    for message in reversed(stored.messages if stored is not None else []):
        if message.role == "tool" and message.tool_call_id == call_id:
            return message.content or ""
    return None


def _chain_before(messages: list[Message], at: int) -> str:
    chains = chain_of(messages[:at])
    return chains[-1] if chains else EMPTY_CHAIN
