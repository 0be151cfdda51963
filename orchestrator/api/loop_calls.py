"""One model call of a task whose loop is the author's own, whichever wire it came by (Chat Completions, or
the Responses API turned into one): checked, sent to the workflow as only what its copy of the conversation
lacks, and refused in words that say how to fix it.
"""

from __future__ import annotations

from pydantic import ValidationError

from sdk.wire.limits import MAX_TOKENS_PER_STEP
from sdk.wire.own_loop import LoopCall, LoopReply, call_shape
from sdk.wire.transcript import EMPTY_CHAIN, chain_of, request_hash

from ..catalogue import forces_tool_calls
from ..store import TaskRecord
from .chat_wire import ChatRequest
from .errors import ApiError, conflict, field_of, invalid, unavailable
from .live_reply import LiveReply
from .loop_limits import check_context_window, check_payload
from .loop_store import whole_reply
from .principal import Principal
from .services import Services
from .tasks import require_running
from .temporal_gateway import TemporalUnavailable, UpdateRejected, WorkflowGone

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
    tools = body.tool_schemas()
    limit = body.answer_limit()
    if entry is not None and entry.provider == "self-hosted":  # a hosted provider's window is its own, not the entry's
        answer = await _answer_tokens(svc, record, limit, body)
        await check_context_window(svc, entry, instructions, conversation, tools, answer)
    reply = await _answer(svc, task_id, instructions, conversation, tools, settings, limit)
    if reply.replayed and limit is not None and reply.completion_tokens > limit:
        field = "max_completion_tokens" if body.max_completion_tokens is not None else "max_tokens"
        raise conflict(
            f"this call was answered before with {reply.completion_tokens} tokens, and its reply stands: a call sent"
            f" again is answered with that reply, which {field}={limit} would cut (ask for at least"
            f" {reply.completion_tokens}, or leave {field} out)",
            field=field,
        )
    return model, reply


async def _answer_tokens(
    svc: Services, record: TaskRecord, limit: int | None, body: ChatRequest
) -> tuple[int, str | None]:
    """The most answer tokens the call's step may ask the engine for (workflows/task_actions.py `generate`), and
    the call's field that asked for them (None when the agent's `max_tokens_per_step` did)."""
    agent = await svc.db(svc.store.agents.get, record.state.agent, record.state.agent_version)
    most = agent.max_tokens_per_step if agent is not None else MAX_TOKENS_PER_STEP
    if limit is None or limit >= most:
        return most, None
    return limit, "max_completion_tokens" if body.max_completion_tokens is not None else "max_tokens"


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
            check_payload(call)
            return await whole_reply(svc, task_id, await svc.temporal.loop_call(task_id, call))
        except UpdateRejected as exc:
            if exc.kind == "TranscriptMoved" and attempt == 0:
                continue
            if exc.kind == "TranscriptMoved":
                raise await _moved(svc, task_id, held.length if held else 0, chains[-1], call.shape) from None
            raise refusal(exc) from None
        except (TemporalUnavailable, WorkflowGone) as exc:
            raise unreachable(exc) from None
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


def refusal(exc: UpdateRejected) -> ApiError:
    status, field = _REFUSALS.get(exc.kind or "", (409, "task_id"))
    return ApiError(status, str(exc), field=field)


def unreachable(exc: Exception) -> ApiError:
    if isinstance(exc, TemporalUnavailable):
        return unavailable(str(exc))
    return conflict(str(exc), field="task_id")
