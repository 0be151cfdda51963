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
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sdk import TaskState
from sdk.wire.limits import MAX_TOOL_RESULT_CHARS
from sdk.wire.own_loop import MAX_CALL_ID_CHARS, LoopCall, LoopFinish, LoopReply, LoopToolResult, call_shape
from sdk.wire.transcript import EMPTY_CHAIN, chain_of, request_hash

from ..catalogue import forces_tool_calls
from ..store import TaskRecord
from .auth import TaskWriter
from .chat_wire import ChatRequest, closing_chunks, completion, text_chunk
from .errors import ERROR_RESPONSES, ApiError, conflict, field_of, invalid, not_found, unavailable
from .live_reply import LiveReply, TextDeparted, stream_error
from .principal import Principal
from .services import Services, Svc
from .tasks import current_state, require_running
from .temporal_gateway import TemporalUnavailable, UpdateRejected, WorkflowGone

# What a model call of an own loop may answer, on either wire (chat/completions, responses).
OWN_LOOP_RESPONSES: dict[int | str, dict] = {
    **ERROR_RESPONSES,
    402: {**ERROR_RESPONSES[409], "description": "out_of_budget"},
    502: {**ERROR_RESPONSES[409], "description": "model_call_failed"},
}
router = APIRouter(prefix="/v1/tasks", tags=["own loop"], responses=OWN_LOOP_RESPONSES)

# A refusal's kind (the workflow's ApplicationError type): the status it answers with, and the field to blame.
_REFUSALS = {
    "OutOfBudget": (402, "budget"),
    "MaxSteps": (409, "max_steps"),
    "TranscriptMoved": (409, "messages"),
    "UnknownToolCall": (404, "call_id"),
    "ModelCallFailed": (502, "model"),
    "BudgetViolation": (409, "budget"),
    "AwaitsApproval": (409, "approvals"),  # a person has yet to approve or reject the loop's tool calls
}


# A shape's keys (sdk/wire/own_loop.py `call_shape`) as the wire names what differs.
_SHAPE_FIELDS = {"instructions": "messages (system)", "tools": "tools"}


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


async def followed_call(svc: Services, task_id: str, caller: Principal, body: ChatRequest) -> LiveReply:
    """The call sent, its step's text followed as it is written; returns once the text begins (or the call is
    answered), so a refusal still answers with its status rather than inside a stream."""
    record = await svc.task_record(task_id, caller)
    # The stored step count lags the workflow's until the next step writes its predecessor: ask the workflow.
    state = await svc.temporal.query_state(task_id) or record.state
    live = LiveReply(svc, task_id, record.state.model, state.step + 1, answer_call(svc, task_id, caller, body))
    try:
        await live.start()
    except BaseException:
        await live.close()
        raise
    return live


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


async def answer_call(svc: Services, task_id: str, caller: Principal, body: ChatRequest) -> tuple[str, LoopReply]:
    """The task's model and its reply to one call of its own loop, whichever wire the call came by (Chat
    Completions, or the Responses API turned into one): checked, sent to the workflow, and never a replay longer
    than the call allows. Refusals name the chat call's fields."""
    record = await svc.task_record(task_id, caller)
    require_running(record)
    model = record.state.model
    if body.model is not None and body.model != model:
        raise invalid("model", f"task {task_id} runs {model!r}; a call may not ask for {body.model!r}")
    try:
        settings = body.settings()
    except ValidationError as exc:
        first = exc.errors()[0]
        raise invalid(field_of(first["loc"]) or "settings", first["msg"]) from None
    if (problem := body.tool_choice_problem()) is not None:
        raise invalid("tool_choice", problem)
    entry = await svc.db(svc.catalogue.get, model)
    if body.forces_a_tool_call and entry is not None and not forces_tool_calls(entry):
        raise invalid(
            "tool_choice",
            f"{model} is served by {entry.engine}, which cannot force a tool call: send 'auto' (the model chooses)"
            " or 'none'",
        )
    instructions, conversation = body.split()
    if not conversation:
        raise invalid("messages", "a call needs at least one message after its system messages")
    limit = body.answer_limit()
    reply = await _answer(svc, task_id, instructions, conversation, body.tool_schemas(), settings, limit)
    if reply.replayed and limit is not None and reply.completion_tokens > limit:
        field = "max_completion_tokens" if body.max_completion_tokens is not None else "max_tokens"
        raise conflict(
            f"this call was answered before with {reply.completion_tokens} tokens, and its reply stands: a call sent"
            f" again is answered with that reply, which {field}={limit} would cut (ask for at least"
            f" {reply.completion_tokens}, or leave {field} out)",
            field=field,
        )
    return model, reply


async def _answer(
    svc: Services,
    task_id: str,
    instructions: str | None,
    conversation: list,
    tools: list[dict],
    settings: dict,
    answer_limit: int | None,
) -> LoopReply:
    """Send the workflow what its copy of the conversation lacks. Another call of the loop may land between the
    question and the call: the workflow then refuses this one as moved, and it is sent again once."""
    chains = chain_of(conversation)
    asked = request_hash(chains[-1], instructions, tools, settings)
    for attempt in range(2):
        try:
            held = await svc.temporal.loop_transcript(task_id)
            if held is None:
                raise conflict(
                    f"task {task_id}'s agent runs Berth's own loop: it takes no model calls from outside"
                    " (register the agent with loop='own')",
                    field="task_id",
                )
            extends = held.length <= len(conversation) and held.chain == (
                chains[held.length - 1] if held.length else EMPTY_CHAIN
            )
            # A prefix that is not the task's may still be a call the workflow answered before: it checks that first.
            length, chain = (held.length, held.chain) if extends else (len(conversation), chains[-1])
            call = LoopCall(
                conversation=chains[-1],
                shape=call_shape(instructions, tools, settings),
                request_hash=asked,
                prefix_length=length,
                prefix_chain=chain,
                new_messages=conversation[length:] if extends else [],
                instructions=instructions,
                tools=tools,
                settings=settings,
                max_tokens=answer_limit,
            )
            return await svc.temporal.loop_call(task_id, call)
        except UpdateRejected as exc:
            if exc.kind == "TranscriptMoved" and attempt == 0:
                continue
            if exc.kind == "TranscriptMoved":
                raise await _moved(svc, task_id, held.length if held else 0, chains[-1], call.shape) from None
            raise _refusal(exc) from None
        except (TemporalUnavailable, WorkflowGone) as exc:
            raise _unreachable(exc) from None
    raise AssertionError("unreachable: the second attempt returns or raises")


async def _moved(svc: Services, task_id: str, held: int, conversation: str, shape: dict[str, str]) -> ApiError:
    """Why a call that does not extend the task's conversation is refused, in the words that fix it: the setting
    that differs from a call answered on these very messages, or the rule a loop's first call must follow."""
    try:
        answered = await svc.temporal.loop_asked(task_id, conversation)
    except (TemporalUnavailable, WorkflowGone, UpdateRejected):
        answered = []
    for earlier in answered:
        differs = sorted(k for k in set(earlier) | set(shape) if earlier.get(k) != shape.get(k))
        if differs:
            field = _SHAPE_FIELDS.get(differs[0], differs[0])
            return conflict(
                f"these messages were answered before with another {field} ({', '.join(differs)} differ); the task"
                f" holds one conversation, so a call it answered is not asked again with other settings: send it as"
                f" it was to get its reply again, or add the reply to the messages and go on",
                field=field,
            )
    if held <= 1:
        return conflict(
            f"task {task_id}'s conversation begins with its input, as one user message: an own loop's first call"
            " sends that message first after its system messages (submit the task with the loop's first user"
            " message as its input)",
            field="messages",
        )
    return conflict(
        f"the call's messages do not extend the {held} messages task {task_id} holds: an own loop sends the whole"
        " conversation each call, its earlier messages and the replies it got unchanged",
        field="messages",
    )


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
        raise _refusal(exc) from None
    except (TemporalUnavailable, WorkflowGone) as exc:
        raise _unreachable(exc) from None


@router.get("/{task_id}/tool-results/{call_id}", response_model=ToolResultView)
async def get_tool_result(task_id: str, call_id: str, svc: Svc, caller: TaskWriter) -> ToolResultView:
    """A tool result the loop reported before (404 when none was)."""
    _check_call_id(call_id)
    record = await svc.task_record(task_id, caller)
    require_running(record)
    try:
        content = await svc.temporal.loop_tool_result_of(task_id, call_id)
    except UpdateRejected as exc:
        raise _refusal(exc) from None
    except (TemporalUnavailable, WorkflowGone) as exc:
        raise _unreachable(exc) from None
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
        raise _refusal(exc) from None
    except (TemporalUnavailable, WorkflowGone) as exc:
        raise _unreachable(exc) from None
    return await current_state(svc, record)


def _check_call_id(call_id: str) -> None:
    if not 1 <= len(call_id) <= MAX_CALL_ID_CHARS:
        raise invalid("call_id", f"a tool call id has 1 to {MAX_CALL_ID_CHARS} characters")


def _refusal(exc: UpdateRejected) -> ApiError:
    status, field = _REFUSALS.get(exc.kind or "", (409, "task_id"))
    return ApiError(status, str(exc), field=field)


def _unreachable(exc: Exception) -> ApiError:
    if isinstance(exc, TemporalUnavailable):
        return unavailable(str(exc))
    return conflict(str(exc), field="task_id")
