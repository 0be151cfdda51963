"""The Responses API's replies: a task's answer to one call as a `response` object, or as its stream of events.

The request side (what a call may send, and the Chat Completions call it means) is `responses_wire.py`.
"""

from __future__ import annotations

import time
from typing import Any

from sdk.wire.own_loop import LoopReply

from .responses_wire import ResponsesRequest


def _message_id(task_id: str, step: int) -> str:
    return f"msg_{task_id}_{step}"


def _message_item(task_id: str, step: int, text: str) -> dict[str, Any]:
    return {
        "type": "message",
        "id": _message_id(task_id, step),
        "status": "completed",
        "role": "assistant",
        "content": [_text_part(text)],
    }


def _output(task_id: str, step: int, reply: LoopReply) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    if reply.answer.content:
        items.append(_message_item(task_id, step, reply.answer.content))
    for call in reply.answer.tool_calls or ():
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


def response(task_id: str, model: str, step: int, request: ResponsesRequest, reply: LoopReply | None) -> dict[str, Any]:
    """The `response` object of the call run as `step`: in progress (no reply yet: a stream's opening) or done."""
    cut = reply is not None and reply.finish_reason == "length" and not reply.answer.tool_calls
    status = "in_progress" if reply is None else "incomplete" if cut else "completed"
    body: dict[str, Any] = {
        "id": f"resp_{task_id}_{step}",
        "object": "response",
        "created_at": int(time.time()),
        "status": status,
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if cut else None,
        "instructions": request.instructions,
        "max_output_tokens": request.max_output_tokens,
        "model": model,
        "output": _output(task_id, step, reply) if reply is not None else [],
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


class ResponseEvents:
    """The events a streaming client reads, made as the reply is written: the response opened, its message item
    added with each piece of text as a delta, then (the reply known) the text done, each function call whole,
    and the response completed (or incomplete). Numbered in order by `sequence_number`."""

    def __init__(self, task_id: str, model: str, step: int, request: ResponsesRequest) -> None:
        self.task_id, self.model, self.step, self.request = task_id, model, step, request
        self._sent = 0
        self._text: str | None = None  # the message item's text so far, once it is opened

    def opening(self) -> list[dict[str, Any]]:
        opened = response(self.task_id, self.model, self.step, self.request, None)
        return [self._event("response.created", response=opened), self._event("response.in_progress", response=opened)]

    def text(self, piece: str) -> list[dict[str, Any]]:
        events = []
        if self._text is None:
            self._text = ""
            item = {**_message_item(self.task_id, self.step, ""), "status": "in_progress", "content": []}
            events.append(self._event("response.output_item.added", output_index=0, item=item))
            events.append(self._event("response.content_part.added", **self._at(), part=_text_part("")))
        self._text += piece
        events.append(self._event("response.output_text.delta", **self._at(), delta=piece, logprobs=[]))
        return events

    def closing(self, reply: LoopReply) -> list[dict[str, Any]]:
        events = []
        items = _output(self.task_id, self.step, reply)
        for index, item in enumerate(items):
            if item["type"] == "message":
                text = item["content"][0]["text"]
                events += self.text(text[len(self._text or "") :]) if text != self._text else []
                events.append(self._event("response.output_text.done", **self._at(), text=text, logprobs=[]))
                events.append(self._event("response.content_part.done", **self._at(), part=_text_part(text)))
            else:
                added = {**item, "status": "in_progress", "arguments": ""}
                events.append(self._event("response.output_item.added", output_index=index, item=added))
                at = {"item_id": item["id"], "output_index": index}
                events.append(self._event("response.function_call_arguments.delta", **at, delta=item["arguments"]))
                events.append(
                    self._event(
                        "response.function_call_arguments.done", **at, name=item["name"], arguments=item["arguments"]
                    )
                )
            events.append(self._event("response.output_item.done", output_index=index, item=item))
        done = response(self.task_id, self.model, self.step, self.request, reply)
        kind = "response.completed" if done["status"] == "completed" else "response.incomplete"
        return events + [self._event(kind, response=done)]

    def error(self, error: dict[str, Any]) -> dict[str, Any]:
        """The stream's last event when it cannot go on (`error` as OpenAI's streams carry it)."""
        return self._event("error", code=error["code"], message=error["message"], param=error["param"])

    def _at(self) -> dict[str, Any]:
        return {"item_id": _message_id(self.task_id, self.step), "output_index": 0, "content_index": 0}

    def _event(self, kind: str, **fields: Any) -> dict[str, Any]:
        self._sent += 1
        return {"type": kind, "sequence_number": self._sent - 1, **fields}


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
