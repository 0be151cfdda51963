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
from .live_reply import LiveReply, TextDeparted, stream_error
from .loop_calls import answer_call, followed_call
from .own_loop import OWN_LOOP_RESPONSES
from .responses_reply import ResponseEvents, response
from .responses_wire import ResponsesRequest, chat_field
from .services import Svc

router = APIRouter(prefix="/v1/tasks", tags=["own loop"], responses=OWN_LOOP_RESPONSES)


@router.post("/{task_id}/responses")
async def create_response(task_id: str, body: ResponsesRequest, svc: Svc, caller: TaskWriter) -> object:
    """One model call of the task's own loop, as OpenAI's Responses API (text, function calls, streaming)."""
    chat = body.as_chat()
    try:
        if not body.stream:
            model, reply = await answer_call(svc, task_id, caller, chat)
            return response(task_id, model, reply.step, body, reply)
        live = await followed_call(svc, task_id, caller, chat)
    except ApiError as exc:
        if exc.field is not None:
            exc.field = chat_field(exc.field)
        raise
    return StreamingResponse(
        _stream(live, ResponseEvents(task_id, live.model, live.step, body)), media_type="text/event-stream"
    )


async def _stream(live: LiveReply, events: ResponseEvents) -> AsyncIterator[str]:
    try:
        for event in events.opening():
            yield _event(event)
        async for piece in live.deltas():
            for event in events.text(piece):
                yield _event(event)
        assert live.reply is not None
        for event in events.closing(live.reply):
            yield _event(event)
    except (TextDeparted, ApiError) as exc:
        yield _event(events.error(stream_error(exc)))
    finally:
        await live.close()


def _event(event: dict) -> str:
    return f"event: {event['type']}\ndata: {json.dumps(event)}\n\n"
