"""Routes of a task whose agent loop is the author's own: its model calls, its tool results, its end.

`POST /v1/tasks/{id}/chat/completions` is OpenAI's Chat Completions, scoped to one task: any client that
speaks it (the Agents SDK through `sdk.openai_agents`, LangChain's ChatOpenAI) gets each call run as a step
of the task, under its budget, on the pool. The caller must own the task right now (its key's tenant, or the
task's own token); the workflow then checks the conversation by hash (`sdk/wire/transcript.py`).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

from fastapi import APIRouter, status
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from sdk import TaskState
from sdk.wire.limits import MAX_TOOL_RESULT_CHARS
from sdk.wire.own_loop import MAX_CALL_ID_CHARS, LoopFinish, LoopToolResult

from ..store import TaskRecord
from .auth import TaskWriter
from .chat_wire import ChatRequest, closing_chunks, completion, text_chunk
from .errors import ERROR_RESPONSES, ApiError, invalid, not_found
from .live_reply import LiveReply, TextDeparted, stream_error
from .loop_calls import answer_call, followed_call, refusal, unreachable
from .loop_store import stored_tool_result
from .services import Svc
from .tasks import current_state, require_running
from .temporal_gateway import TemporalUnavailable, UpdateRejected, WorkflowGone

# What a model call of an own loop may answer, on either wire (chat/completions, responses).
OWN_LOOP_RESPONSES: dict[int | str, dict] = {
    **ERROR_RESPONSES,
    402: {**ERROR_RESPONSES[409], "description": "out_of_budget"},
    502: {**ERROR_RESPONSES[409], "description": "model_call_failed"},
}
router = APIRouter(prefix="/v1/tasks", tags=["own loop"], responses=OWN_LOOP_RESPONSES)


class ModelView(BaseModel):
    """A model as OpenAI's `GET /models` lists it."""

    id: str
    object: str = "model"
    created: int
    owned_by: str = "berth"


class ModelList(BaseModel):
    object: str = "list"
    data: list[ModelView]


class ToolResultBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    content: str = Field(max_length=MAX_TOOL_RESULT_CHARS)


class ToolResultView(BaseModel):
    call_id: str
    content: str


class FinishBody(LoopFinish):
    model_config = ConfigDict(extra="forbid")


@router.post("/{task_id}/chat/completions")
async def chat_completions(task_id: str, body: ChatRequest, svc: Svc, caller: TaskWriter) -> object:
    """One model call of the task's own loop, as OpenAI's Chat Completions: run as the task's next step (its
    budget reserved and booked, its replica placed by the pool), or, when the loop made this very call before
    (it re-ran after a crash), answered again from the task without generating or spending."""
    if not body.stream:
        model, reply = await answer_call(svc, task_id, caller, body)
        return completion(task_id, model, reply)
    live = await followed_call(svc, task_id, caller, body)
    include_usage = bool(body.stream_options and body.stream_options.include_usage)
    return StreamingResponse(_chat_stream(live, include_usage), media_type="text/event-stream")


async def _chat_stream(live: LiveReply, include_usage: bool) -> AsyncIterator[str]:
    opened = False
    try:
        async for piece in live.deltas():
            yield _data(text_chunk(live.task_id, live.model, live.step, piece, first=not opened))
            opened = True
        assert live.reply is not None
        for chunk in closing_chunks(live.task_id, live.model, live.reply, include_usage, opened):
            yield _data(chunk)
        yield "data: [DONE]\n\n"
    except (TextDeparted, ApiError) as exc:
        yield _data({"error": stream_error(exc)})
    finally:
        await live.close()


def _data(chunk: dict) -> str:
    return f"data: {json.dumps(chunk)}\n\n"


@router.get("/{task_id}/models", response_model=ModelList)
async def list_models(task_id: str, svc: Svc, caller: TaskWriter) -> ModelList:
    """OpenAI's model list at the task's base URL: the task's one model (a client checks what it may name)."""
    record = await svc.task_record(task_id, caller)
    return ModelList(data=[_model_view(record)])


@router.get("/{task_id}/models/{model:path}", response_model=ModelView)
async def get_model(task_id: str, model: str, svc: Svc, caller: TaskWriter) -> ModelView:
    record = await svc.task_record(task_id, caller)
    if model != record.state.model:
        raise not_found(f"task {task_id} runs {record.state.model!r}; it serves no model {model!r}", field="model")
    return _model_view(record)


def _model_view(record: TaskRecord) -> ModelView:
    return ModelView(id=record.state.model, created=int(record.created_at.timestamp()))


@router.put("/{task_id}/tool-results/{call_id}", status_code=status.HTTP_204_NO_CONTENT)
async def put_tool_result(task_id: str, call_id: str, body: ToolResultBody, svc: Svc, caller: TaskWriter) -> None:
    """Keep what the loop's tool returned for one of the model's calls: the loop re-run after a crash reads it
    back instead of running the tool again. The first result reported for a call stands."""
    _check_call_id(call_id)
    record = await svc.task_record(task_id, caller)
    require_running(record)
    try:
        await svc.temporal.loop_tool_result(task_id, LoopToolResult(call_id=call_id, content=body.content))
    except UpdateRejected as exc:
        raise refusal(exc) from None
    except (TemporalUnavailable, WorkflowGone) as exc:
        raise unreachable(exc) from None


@router.get("/{task_id}/tool-results/{call_id}", response_model=ToolResultView)
async def get_tool_result(task_id: str, call_id: str, svc: Svc, caller: TaskWriter) -> ToolResultView:
    """A tool result the loop reported before (404 when none was)."""
    _check_call_id(call_id)
    record = await svc.task_record(task_id, caller)
    require_running(record)
    try:
        content = await svc.temporal.loop_tool_result_of(task_id, call_id)
    except UpdateRejected as exc:
        raise refusal(exc) from None
    except (TemporalUnavailable, WorkflowGone) as exc:
        raise unreachable(exc) from None
    if content is None:
        content = await stored_tool_result(svc, task_id, call_id)
    if content is None:
        raise not_found(f"task {task_id} has no result of tool call {call_id!r}", field="call_id")
    return ToolResultView(call_id=call_id, content=content)


@router.post("/{task_id}/finish", response_model=TaskState)
async def finish(task_id: str, body: FinishBody, svc: Svc, caller: TaskWriter) -> TaskState:
    """The loop is done: its output ends the task completed (an `error` ends it failed)."""
    record = await svc.task_record(task_id, caller)
    require_running(record)
    try:
        await svc.temporal.loop_finish(task_id, LoopFinish(output=body.output, error=body.error))
    except UpdateRejected as exc:
        raise refusal(exc) from None
    except (TemporalUnavailable, WorkflowGone) as exc:
        raise unreachable(exc) from None
    return await current_state(svc, record)


def _check_call_id(call_id: str) -> None:
    if not 1 <= len(call_id) <= MAX_CALL_ID_CHARS:
        raise invalid("call_id", f"a tool call id has 1 to {MAX_CALL_ID_CHARS} characters")
