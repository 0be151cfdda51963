"""An OpenAI Agents SDK agent, run as a Berth task: its loop stays the author's, its model calls and budget Berth's.

`run_on_berth` registers a Berth agent whose loop is its own (`loop="own"`), submits a task for the input and
runs the Agents SDK's `Runner` with a model provider that sends every model call to that task's Chat
Completions route: each call is a step of the task, reserved against its budget, placed on the pool where the
model's weights are, booked and checkpointed. The agent's function tools report their results to the task,
so running the same script again with the same `task_id` after a crash replays the model calls the task
answered (free: nothing is generated or charged twice) and reads the tools' results back instead of running
them again, then goes on from where the loop stopped.

A tool with `needs_approval` is Berth's human in the loop: when the run stops at such a call, the task holds the
call and the run's state and waits `awaiting_input`, naming the tool and its arguments, until a person approves
or rejects it (`TaskHandle.approve`/`reject`, `berth approve`/`reject`, the UI, MCP); the run then resumes from
that state, in this process or in a re-run of the script after it died. Features the task cannot serve (an
agent used as a tool, hosted tools) are refused before anything is submitted.

Needs the `agents` extra (`pip install "berth-sdk[agents]"`); `import sdk` never imports it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import hashlib
import hmac
import json
import re
import zlib
from dataclasses import dataclass
from typing import Any

import httpx
from agents import (
    Agent,
    FunctionTool,
    Handoff,
    Model,
    ModelProvider,
    OpenAIChatCompletionsModel,
    RunConfig,
    RunContextWrapper,
    Runner,
    RunResult,
    RunState,
    TResponseInputItem,
    UserError,
    gen_trace_id,
)
from agents.items import ItemHelpers
from agents.models.chatcmpl_converter import Converter
from agents.tool_context import ToolContext
from openai import APIConnectionError, APIStatusError, AsyncOpenAI
from pydantic import BaseModel

from ._budget import Budget
from ._client import ApiUnreachable, Client, TaskHandle
from ._errors import BerthError
from ._spec import AgentSpec
from ._state import ToolCallToApprove
from .wire.loop_approvals import MAX_RUN_STATE_CHARS, ApprovalRequest, LoopApprovals
from .wire.task_events import ApprovalDecidedEvent, parse_event

# A model call waits as a step does: for a GPU, perhaps for its model to load, then for the generation.
MODEL_CALL_TIMEOUT_S = 31 * 60.0


class BerthModelProvider(ModelProvider):
    """Every model the Agents SDK asks for is the task's model, reached through the task's Chat Completions
    route: a different model name is refused, since the task's budget and placement are for its own."""

    def __init__(self, task: TaskHandle, model: str, trace_id: str | None = None) -> None:
        """`trace_id`: the run's Agents SDK trace; each call carries it as a W3C `traceparent`, so that Berth's
        spans of the call (the API's, the workflow's, the generation's) join the same trace id."""
        self.task, self.model = task, model
        client = task._client
        parent = traceparent_of(trace_id)
        self._openai = AsyncOpenAI(
            default_headers={"traceparent": parent} if parent is not None else None,
            base_url=task.openai_base_url,
            api_key=client._api_key or "berth-dev-stack-key-unset",
            timeout=MODEL_CALL_TIMEOUT_S,
            # A retried call is safe: the task recognises a call it answered and replays its reply.
            max_retries=2,
            http_client=httpx.AsyncClient(transport=client._transport, timeout=MODEL_CALL_TIMEOUT_S)  # type: ignore[arg-type]  # openai's stubs name only httpx2's client; it takes httpx's too
            if client._transport is not None
            else None,
        )

    def get_model(self, model_name: str | None) -> Model:
        if model_name not in (None, "", self.model):
            raise UserError(
                f"model: task {self.task.task_id} runs {self.model!r} on Berth; an agent of its loop"
                f" asked for {model_name!r} (leave Agent.model unset or name the task's model)"
            )
        return OpenAIChatCompletionsModel(model=self.model, openai_client=self._openai)

    async def aclose(self) -> None:
        await self._openai.close()


@dataclass
class BerthRun:
    """What `run_on_berth` returns: the Agents SDK's result, and the Berth task that ran it."""

    task: TaskHandle
    result: RunResult

    @property
    def final_output(self) -> Any:
        return self.result.final_output


def durable_tools(agent: Agent[Any], task: TaskHandle) -> Agent[Any]:
    """A copy of `agent` (and of every agent it hands off to) whose function tools keep their results in the
    task: a call the task holds a result for returns it without running the tool again. Other tools (hosted,
    MCP) run as they are."""
    return _Durable(task).agent(agent)


class _Durable:
    def __init__(self, task: TaskHandle) -> None:
        self.task = task
        self.copies: dict[int, Agent[Any]] = {}

    def agent(self, agent: Agent[Any]) -> Agent[Any]:
        done = self.copies.get(id(agent))
        if done is not None:
            return done
        copy = agent.clone(tools=[self.tool(t) for t in agent.tools])
        self.copies[id(agent)] = copy  # before its handoffs: two agents may hand off to each other
        copy.handoffs = [self.handoff(h) for h in agent.handoffs]
        return copy

    def handoff(self, target: Agent[Any] | Handoff[Any, Any]) -> Agent[Any] | Handoff[Any, Any]:
        if isinstance(target, Agent):
            return self.agent(target)
        invoke = target.on_invoke_handoff

        async def to_durable_agent(ctx: RunContextWrapper[Any], arguments: str) -> Agent[Any]:
            target = await invoke(ctx, arguments)
            refuse_unsupported(target)  # built at run time: checked when it is handed to
            return self.agent(target)

        return dataclasses.replace(target, on_invoke_handoff=to_durable_agent)

    def tool(self, tool: Any) -> Any:
        if not isinstance(tool, FunctionTool):
            return tool
        invoke, task = tool.on_invoke_tool, self.task

        async def kept_or_run(ctx: ToolContext[Any], arguments: str) -> Any:
            kept = await task.kept_tool_result(ctx.tool_call_id)
            if kept is not None:
                return kept
            output = await invoke(ctx, arguments)
            # What the model is sent for it: only text is kept (an image or file output runs again on a re-run).
            sent = ItemHelpers._convert_tool_output(output)
            if isinstance(sent, str):
                await task.keep_tool_result(ctx.tool_call_id, sent)
            return output

        return dataclasses.replace(tool, on_invoke_tool=kept_or_run)


def berth_agent_name(agent: Agent[Any]) -> str:
    """The Berth agent an Agents SDK agent registers as, by default: its name, spelled as Berth's names are."""
    name = re.sub(r"[^a-z0-9-]+", "-", agent.name.lower()).strip("-")[:63].strip("-")
    return name or "agent"


async def run_on_berth(
    client: Client,
    agent: Agent[Any],
    input: str | list[TResponseInputItem],
    *,
    model: str,
    budget: Budget | int,
    task_id: str | None = None,
    berth_agent: str | None = None,
    max_steps: int = 50,
    max_turns: int = 10,
    context: Any = None,
    run_config: RunConfig | None = None,
) -> BerthRun:
    """Run `agent` on `input` (a string, or input items as `Runner.run` takes them) as a Berth task on `model` (a
    model of Berth's catalogue), within `budget`.

    With a `task_id` that names a task already running (the script was killed, or its machine lost), the run
    resumes it: the calls and tool results the task holds are replayed, a tool call waiting for approval is
    waited for again, and the loop goes on from there. The task ends completed with the final output, or failed
    with the run's error; a run cut off by Berth itself (its budget short, the API unreachable) or by the caller
    (Ctrl-C) leaves the task open to be resumed, until its budget's grace or the agent's `loop_idle_s` runs out.

    `run_config` is the caller's, tracing included; its model provider becomes the task's. Its trace (a new
    trace id when it names none) is recorded on the task and Berth's spans of each model call join it.
    """
    refuse_unsupported(agent, model)
    chosen = run_config.model if run_config is not None else None
    if isinstance(chosen, Model) or chosen not in (None, "", model):
        raise UserError(
            f"run_config.model: the task runs {model!r} on Berth; a RunConfig naming another model (or a Model"
            " object, whose calls would not reach the task) is refused: leave it unset"
        )
    opening = task_input(input)
    spec = AgentSpec(name=berth_agent or berth_agent_name(agent), model=model, loop="own", max_steps=max_steps)
    await client.register(spec)
    task = await client.submit(spec.name, opening, budget=budget, task_id=task_id)
    caller = run_config or RunConfig()
    trace_id = None if caller.tracing_disabled else caller.trace_id or gen_trace_id()
    provider = BerthModelProvider(task, model, trace_id)
    metadata = {**(caller.trace_metadata or {}), "berth_task_id": task.task_id}
    config = dataclasses.replace(
        caller, model_provider=provider, trace_id=trace_id, trace_metadata=metadata, nest_handoff_history=False
    )  # the task's conversation only grows
    durable = durable_tools(agent, task)
    try:
        if trace_id is not None:
            await task.record_loop_trace(trace_id, config.workflow_name, config.group_id)
        start: str | list[TResponseInputItem] | RunState[Any] = input
        held = await task.approvals()
        kept = unpack_run_state(held.run_state, _signing_key(task)) if held is not None else None
        if held is not None and kept is not None:  # a re-run: the loop last stopped for a person's word; go on
            override = {"context_override": context} if context is not None else {}
            start = await _decided(task, held, await RunState.from_json(durable, kept, **override))
        # A state this caller did not sign is not trusted: the run starts over, its calls replayed by the task up
        # to the same stop, where the decisions held for those calls apply (_ask_and_wait).
        while True:
            result = await Runner.run(durable, start, context=context, max_turns=max_turns, run_config=config)
            if not result.interruptions:
                break
            start = await _ask_and_wait(task, result, trace_id)
    except (BerthError, APIConnectionError):
        raise
    except APIStatusError as refused:
        if refused.status_code != 402 and refused.status_code < 500:
            await _fail(task, refused)
        raise
    except Exception as error:
        await _fail(task, error)
        raise
    finally:
        await provider.aclose()
    output = result.final_output
    await task.finish(output=output.model_dump_json() if isinstance(output, BaseModel) else str(output))
    return BerthRun(task, result)


def refuse_unsupported(agent: Agent[Any], model: str | None = None) -> None:
    """Refuse, before a task is submitted, what a task's own loop cannot serve, naming the agent and the tool:
    an agent used as a tool, hosted tools, and a model other than the task's (`model`)."""
    seen: set[int] = set()
    todo = [agent]
    while todo:
        a = todo.pop()
        if id(a) in seen:
            continue
        seen.add(id(a))
        if isinstance(a.model, Model) or (model is not None and a.model not in (None, "", model)):
            raise UserError(
                f"agent {a.name!r}: its model is {a.model!r}, but the task runs {model!r} on Berth, and a Model"
                " object's calls would not reach the task at all: leave Agent.model unset or name the task's model"
            )
        for tool in a.tools:
            if getattr(tool, "_is_agent_tool", False):
                inner = getattr(getattr(tool, "_agent_instance", None), "name", "another agent")
                raise UserError(
                    f"agent {a.name!r}: tool {tool.name!r} is agent {inner!r} used as a tool (agent.as_tool()), which"
                    " holds a second conversation beside the task's, and a Berth task holds one; make"
                    f" {inner!r} a handoff (handoffs=[...]) or a Berth sub-agent (TaskHandle.spawn) instead"
                )
            if not isinstance(tool, FunctionTool):
                raise UserError(
                    f"agent {a.name!r}: tool {getattr(tool, 'name', type(tool).__name__)!r} is a hosted tool"
                    f" ({type(tool).__name__}), which OpenAI's Responses API runs; a Berth task's model answers"
                    " Chat Completions, which has no hosted tools: give the agent a function tool that does it"
                )
        todo.extend(h for h in a.handoffs if isinstance(h, Agent))


def task_input(input: str | list[TResponseInputItem]) -> str:
    """The task's input: the string, or the text of the first user message of the input items (after any
    system or developer messages, which are instructions). The task's conversation starts with that message, so
    the items must start with one."""
    if isinstance(input, str):
        return input
    messages = Converter.items_to_messages(input)
    rest = [m for m in messages if m.get("role") not in ("system", "developer")]
    first = messages[len(messages) - len(rest)] if rest else None
    if first is None or first.get("role") != "user" or any(m.get("role") in ("system", "developer") for m in rest):
        raise UserError(
            "input: the input items must start (after any system or developer messages) with a user message, and"
            " have no system or developer message after it: a Berth task's conversation starts with the user's"
        )
    content = first.get("content")
    if isinstance(content, str):
        return content
    parts = list(content or ())
    if not parts or any(p.get("type") != "text" for p in parts):
        raise UserError("input: the first user message's content must be text (a Berth task's input is text)")
    return "".join(str(p.get("text", "")) for p in parts)


def traceparent_of(trace_id: str | None) -> str | None:
    """The W3C `traceparent` naming an Agents SDK trace (`trace_<32 hex>`: the same 128 bits as an OpenTelemetry
    trace id) as the parent of Berth's spans; None for an id of another shape."""
    hex_id = (trace_id or "").removeprefix("trace_")
    if not re.fullmatch(r"[0-9a-f]{32}", hex_id) or hex_id == "0" * 32:
        return None
    # The parent span id is the trace's own first 64 bits: Berth's spans hang under the trace, not one span of it.
    return f"00-{hex_id}-{hex_id[:16] if hex_id[:16] != '0' * 16 else '1' * 16}-01"


async def _ask_and_wait(task: TaskHandle, result: RunResult, trace_id: str | None) -> RunState[Any]:
    """The run stopped at tool calls that need approval: hold them and the run's state in the task, wait for a
    person's word on each, and return the state with it applied."""
    state = result.to_state()
    calls = [
        ToolCallToApprove(call_id=item.call_id or "", tool=item.name or "tool", arguments=item.arguments or "")
        for item in result.interruptions
    ]
    packed = pack_run_state(state.to_json(), _signing_key(task))
    held = await task.ask_approval(ApprovalRequest(calls=calls, run_state=packed, trace_id=trace_id))
    return await _decided(task, held, state)


async def _decided(task: TaskHandle, held: LoopApprovals, state: RunState[Any]) -> RunState[Any]:
    """Wait until no held call waits, then apply the decisions to the run's state."""
    patience, seen = DECISION_RECHECK_S[0], 0
    while held.waiting:
        seen = await _next_decision(task, seen, patience)
        held = await task.approvals() or held
        patience = min(patience * 2, DECISION_RECHECK_S[1])
    for item in state.get_interruptions():
        decided = held.decisions.get(item.call_id or "")
        if decided is None:
            raise UserError(f"tool call {item.call_id!r} of {item.name!r} waits for approval but the task holds none")
        if decided.approved:
            state.approve(item)
        else:
            state.reject(item, rejection_message=decided.reason)  # None: the SDK's own message to the model
    return state


# A decision wakes the wait through the task's event stream at once; where the stream cannot reach the loop live
# (a proxy that buffers it), the loop looks again after 1 s, then 2, 4, ... up to 30 s.
DECISION_RECHECK_S = (1.0, 30.0)


async def _next_decision(task: TaskHandle, after: int, patience_s: float) -> int:
    """Wait on the task's event stream for a decision after event `after` (or the task's end), `patience_s` at
    most; the last event seen."""
    with contextlib.suppress(TimeoutError, ApiUnreachable):
        async with asyncio.timeout(patience_s), contextlib.aclosing(task.events(after=after)) as events:
            async for event in events:
                after = event.seq
                if isinstance(parse_event(event), ApprovalDecidedEvent):
                    break
    return after


# The run's state is opaque to Berth; compressed, a long conversation fits the task's bound (MAX_RUN_STATE_CHARS).
# It is signed with the caller's API key: anyone who may write to the task (its own token, handed to its tools,
# included) can post a state, and the Agents SDK warns never to resume from one it did not keep itself.
_PACKED = "zlib+b64:"


def pack_run_state(state: dict[str, Any], key: bytes) -> str:
    text = json.dumps(state, separators=(",", ":"), default=str)  # a context that is no JSON is the caller's to pass
    body = base64.b64encode(zlib.compress(text.encode(), 9)).decode()
    packed = f"{_PACKED}{hmac.new(key, body.encode(), hashlib.sha256).hexdigest()}.{body}"
    if len(packed) > MAX_RUN_STATE_CHARS:
        raise UserError(
            f"the run's state is {len(packed)} characters compressed; a task holds at most {MAX_RUN_STATE_CHARS}"
            " while a tool call waits for approval (a shorter conversation, or fewer tool outputs kept, fits)"
        )
    return packed


def unpack_run_state(packed: str, key: bytes) -> dict[str, Any] | None:
    """The state `pack_run_state` packed with `key`; None for any other (not signed with it, or not one)."""
    signature, dot, body = packed.removeprefix(_PACKED).partition(".")
    expected = hmac.new(key, body.encode(), hashlib.sha256).hexdigest()
    if not packed.startswith(_PACKED) or not dot or not hmac.compare_digest(signature, expected):
        return None
    state: dict[str, Any] = json.loads(zlib.decompress(base64.b64decode(body)))
    return state


def _signing_key(task: TaskHandle) -> bytes:
    return (task._client._api_key or "").encode()


async def _fail(task: TaskHandle, error: Exception) -> None:
    """End the task failed with the run's error, unless it has ended already (the refusal may say it has)."""
    try:
        await task.finish(error=f"{type(error).__name__}: {error}"[:4000])
    except BerthError:
        pass
