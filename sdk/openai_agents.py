"""An OpenAI Agents SDK agent, run as a Berth task: its loop stays the author's, its model calls and budget Berth's.

`run_on_berth` registers a Berth agent whose loop is its own (`loop="own"`), submits a task for the input and
runs the Agents SDK's `Runner` with a model provider that sends every model call to that task's Chat
Completions route: each call is a step of the task, reserved against its budget, placed on the pool where the
model's weights are, booked and checkpointed. The agent's function tools report their results to the task,
so running the same script again with the same `task_id` after a crash replays the model calls the task
answered (free: nothing is generated or charged twice) and reads the tools' results back instead of running
them again, then goes on from where the loop stopped.

Needs the `agents` extra (`pip install "berth-sdk[agents]"`); `import sdk` never imports it.
"""

from __future__ import annotations

import dataclasses
import re
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
    UserError,
)
from agents.items import ItemHelpers
from agents.tool_context import ToolContext
from openai import APIConnectionError, APIStatusError, AsyncOpenAI
from pydantic import BaseModel

from ._budget import Budget
from ._client import Client, TaskHandle
from ._errors import BerthError
from ._spec import AgentSpec

# A model call waits as a step does: for a GPU, perhaps for its model to load, then for the generation.
MODEL_CALL_TIMEOUT_S = 31 * 60.0


class BerthModelProvider(ModelProvider):
    """Every model the Agents SDK asks for is the task's model, reached through the task's Chat Completions
    route: a different model name is refused, since the task's budget and placement are for its own."""

    def __init__(self, task: TaskHandle, model: str) -> None:
        self.task, self.model = task, model
        client = task._client
        self._openai = AsyncOpenAI(
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
            return self.agent(await invoke(ctx, arguments))

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
    input: str,
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
    """Run `agent` on `input` as a Berth task on `model` (a model of Berth's catalogue), within `budget`.

    With a `task_id` that names a task already running (the script was killed, or its machine lost), the run
    resumes it: the calls and tool results the task holds are replayed, and the loop goes on from there. The
    task ends completed with the final output, or failed with the run's error; a run cut off by Berth itself
    (its budget short, the API unreachable) or by the caller (Ctrl-C) leaves the task open to be resumed, until
    its budget's grace or the agent's `loop_idle_s` runs out.
    """
    spec = AgentSpec(name=berth_agent or berth_agent_name(agent), model=model, loop="own", max_steps=max_steps)
    await client.register(spec)
    task = await client.submit(spec.name, input, budget=budget, task_id=task_id)
    provider = BerthModelProvider(task, model)
    config = dataclasses.replace(
        run_config or RunConfig(), model_provider=provider, tracing_disabled=True, nest_handoff_history=False
    )  # the task's conversation only grows
    try:
        result = await Runner.run(
            durable_tools(agent, task), input, context=context, max_turns=max_turns, run_config=config
        )
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


async def _fail(task: TaskHandle, error: Exception) -> None:
    """End the task failed with the run's error, unless it has ended already (the refusal may say it has)."""
    try:
        await task.finish(error=f"{type(error).__name__}: {error}"[:4000])
    except BerthError:
        pass
