"""The Responses API's replies: a task's answer to one call as a `response` object, or as its stream of events.

The request side (what a call may send, and the Chat Completions call it means) is `responses_wire.py`.
"""

from __future__ import annotations

import time
from typing import Any

from sdk.wire.own_loop import LoopReply

from .responses_wire import ResponsesRequest


def _output(task_id: str, reply: LoopReply) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    if reply.message.content:
        items.append(
            {
                "type": "message",
                "id": f"msg_{task_id}_{reply.step}",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": reply.message.content, "annotations": [], "logprobs": []}],
            }
        )
    for call in reply.message.tool_calls or ():
        items.append(
            {
                "type": "function_call",
                "id": f"fc_{call.id}",
                "call_id": call.id,
                "name": call.name,
                "arguments": call.arguments,
                "status": "completed",
            }
        )
    return items


def _usage(reply: LoopReply) -> dict[str, Any]:
    """What this call spent: a replayed call spent nothing (its tokens were booked when it was first made)."""
    prompt, completion = (0, 0) if reply.replayed else (reply.prompt_tokens, reply.completion_tokens)
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": prompt + completion,
    }


def response(task_id: str, model: str, request: ResponsesRequest, reply: LoopReply | None) -> dict[str, Any]:
    """The `response` object: in progress (no reply yet, the stream's opening events) or done."""
    cut = reply is not None and reply.finish_reason == "length" and not reply.message.tool_calls
    status = "in_progress" if reply is None else "incomplete" if cut else "completed"
    body: dict[str, Any] = {
        "id": f"resp_{task_id}_{reply.step if reply is not None else 'next'}",
        "object": "response",
        "created_at": int(time.time()),
        "status": status,
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if cut else None,
        "instructions": request.instructions,
        "max_output_tokens": request.max_output_tokens,
        "model": model,
        "output": _output(task_id, reply) if reply is not None else [],
        "parallel_tool_calls": request.parallel_tool_calls is not False,
        "temperature": request.temperature,
        "top_p": request.top_p,
        "tool_choice": request.tool_choice or "auto",
        "tools": [t.model_dump(exclude_none=True) for t in request.tools or ()],
        "text": {"format": {"type": "text"}} if request.text is None else request.text.model_dump(by_alias=True),
        "metadata": request.metadata or {},
        "usage": _usage(reply) if reply is not None else None,
    }
    if reply is not None:
        body["berth"] = {
            "task_id": task_id,
            "step": reply.step,
            "replayed": reply.replayed,
            "served_by": reply.served_by,
        }
    return body


def response_events(task_id: str, model: str, request: ResponsesRequest, reply: LoopReply) -> list[dict[str, Any]]:
    """The reply as the stream of events a streaming client reads: the response opened, each output item added,
    its text or arguments as one delta, each item done, the response completed (or incomplete)."""
    events: list[dict[str, Any]] = []

    def emit(kind: str, **fields: Any) -> None:
        events.append({"type": kind, "sequence_number": len(events), **fields})

    opening = response(task_id, model, request, None)
    emit("response.created", response=opening)
    emit("response.in_progress", response=opening)
    for index, item in enumerate(_output(task_id, reply)):
        if item["type"] == "message":
            text = item["content"][0]["text"]
            emit(
                "response.output_item.added", output_index=index, item={**item, "status": "in_progress", "content": []}
            )
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            emit("response.content_part.added", item_id=item["id"], output_index=index, content_index=0, part=part)
            emit(
                "response.output_text.delta",
                item_id=item["id"],
                output_index=index,
                content_index=0,
                delta=text,
                logprobs=[],
            )
            emit(
                "response.output_text.done",
                item_id=item["id"],
                output_index=index,
                content_index=0,
                text=text,
                logprobs=[],
            )
            emit(
                "response.content_part.done",
                item_id=item["id"],
                output_index=index,
                content_index=0,
                part={**part, "text": text},
            )
        else:
            emit(
                "response.output_item.added",
                output_index=index,
                item={**item, "status": "in_progress", "arguments": ""},
            )
            emit(
                "response.function_call_arguments.delta",
                item_id=item["id"],
                output_index=index,
                delta=item["arguments"],
            )
            emit(
                "response.function_call_arguments.done",
                item_id=item["id"],
                output_index=index,
                name=item["name"],
                arguments=item["arguments"],
            )
        emit("response.output_item.done", output_index=index, item=item)
    done = response(task_id, model, request, reply)
    emit("response.completed" if done["status"] == "completed" else "response.incomplete", response=done)
    return events
