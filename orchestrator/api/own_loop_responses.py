"""`POST /v1/tasks/{id}/responses`: OpenAI's Responses API on a task whose loop is the author's own.

The Agents SDK's default model and `client.responses.create` call it. Each request is the Chat Completions call
it means (`responses_wire.py`), answered by the same path as `chat/completions` (`own_loop.answer_call`): one
step of the task, budgeted, placed and booked once; sent again, it is answered again for free. Refusals name the
Responses field at fault.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

from fastapi import APIRouter
from fastapi.responses import StreamingResponse

from .auth import TaskWriter
from .errors import ApiError
from .own_loop import OWN_LOOP_RESPONSES, answer_call
from .responses_reply import response, response_events
from .responses_wire import ResponsesRequest, chat_field
from .services import Svc

router = APIRouter(prefix="/v1/tasks", tags=["own loop"], responses=OWN_LOOP_RESPONSES)


@router.post("/{task_id}/responses")
async def create_response(task_id: str, body: ResponsesRequest, svc: Svc, caller: TaskWriter) -> object:
    """One model call of the task's own loop, as OpenAI's Responses API (text, function calls, streaming)."""
    chat = body.as_chat()
    try:
        model, reply = await answer_call(svc, task_id, caller, chat)
    except ApiError as exc:
        if exc.field is not None:
            exc.field = chat_field(exc.field)
        raise
    if not body.stream:
        return response(task_id, model, body, reply)
    return StreamingResponse(_sse(response_events(task_id, model, body, reply)), media_type="text/event-stream")


async def _sse(events: list[dict]) -> AsyncIterator[str]:
    for event in events:
        yield f"event: {event['type']}\ndata: {json.dumps(event)}\n\n"
